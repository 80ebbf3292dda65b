"""The router image's entrypoint: SGLang's own router in front of SGLang replicas.

    python3 -m sglang_stack.entrypoints.router --worker-urls URL[,URL...] [router flags]
    python3 -m sglang_stack.entrypoints.router --service-discovery --selector K=V... [router flags]

This is not a balancer: it checks the worker list and then runs the router the image
installs, in this process with the same flags, so SGLang's Rust router does all routing,
health checking and retrying. Which router that is follows the profile's lock: the Shepherd
Model Gateway (``smg.launch_router``) where it is pinned, else sglang-router
(``sglang_router.launch_router``, its predecessor); both take the flags used here. Three
things happen first:

- ``--worker-urls`` takes the comma-separated list that ``ROUTER_WORKER_URLS``
  holds in ``.env`` (one word, like every other value there) and hands the router
  one URL per argument, which is what its argparse expects (``nargs="*"``).
- Every URL must be ``http(s)://host:port``; an empty list or a malformed URL is
  one line naming ``ROUTER_WORKER_URLS`` and exit 2, instead of a router that
  starts with no workers and answers 503 forever. Without a list, the router must be
  told to find its workers itself: ``--service-discovery`` (Kubernetes: the pods that
  match ``--selector``, followed as they come and go; what `invoke k8s` renders).
- The API key comes from the secret file, as for the SGLang image
  (``sglang_stack.entrypoints.serve``): it is added to the router's ``sys.argv`` in this
  process, so no command line, ``docker inspect`` or process list ever shows it. A key
  given as a flag is refused.

The router renames its process ``sglang::router`` (setproctitle), so find it by
PID, not by command line. Standard library only: this module runs inside the
router image.
"""

from __future__ import annotations

import os
import re
import sys
from urllib.parse import urlsplit

from sglang_stack.errors import UserError

VARIABLE = "ROUTER_WORKER_URLS"
CONTAINER_PORT = 30080
POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")  # the pinned sglang-router's choices, less "manual"
_HOST = re.compile(r"[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]")


def parse_worker_urls(text: str, where: str = VARIABLE) -> list[str]:
    """``http://a:30000,http://b:30000`` -> the URLs; a bad list is a one-line ``UserError``."""
    if re.search(r"\s", (text or "").strip()):
        raise UserError(f"{where}: {text!r}: separate the URLs with commas, no spaces")
    urls = [part.strip() for part in (text or "").split(",") if part.strip()]
    if not urls:
        raise UserError(f"{where} is empty: set it in .env to the workers' URLs, comma-separated, "
                        f"e.g. http://10.0.0.11:30000,http://10.0.0.12:30000")
    for url in urls:
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = None
        host = parts.netloc.rsplit(":", 1)[0] if parts.netloc else ""
        if parts.scheme not in ("http", "https") or not _HOST.fullmatch(host) or port is None or parts.path not in ("", "/"):
            raise UserError(f"{where}: {url!r} is not http://HOST:PORT (comma-separated, no spaces)")
    if len(set(urls)) != len(urls):
        raise UserError(f"{where}: {text!r} names a worker twice")
    return [url.rstrip("/") for url in urls]


# The router launchers, newest first: the image has one of them.
LAUNCHERS = ("smg.launch_router", "sglang_router.launch_router")


def launcher() -> str:
    """The router module this image installs; none is one line."""
    from importlib.util import find_spec

    for module in LAUNCHERS:
        try:
            if find_spec(module) is not None:
                return module
        except ModuleNotFoundError:
            continue
    raise UserError(f"no router in this image: none of {', '.join(LAUNCHERS)} is installed (build --target router)")


def router_argv(args: list[str], module: str | None = None) -> list[str]:
    """The router's command line for our arguments: the worker list split, everything else as given."""
    out: list[str] = []
    i, seen = 0, False
    while i < len(args):
        token = args[i]
        if token == "--worker-urls" or token.startswith("--worker-urls="):
            if token == "--worker-urls":
                i += 1
                values = []
                while i < len(args) and not args[i].startswith("--"):
                    values.append(args[i])
                    i += 1
                value = " ".join(values)  # more than one word is refused below
            else:
                value = token.split("=", 1)[1]
                i += 1
            out += ["--worker-urls", *parse_worker_urls(value)]
            seen = True
            continue
        out.append(token)
        i += 1
    if not seen and not any(a in ("-h", "--help", "--service-discovery") for a in args):
        raise UserError(f"no --worker-urls and no --service-discovery: set {VARIABLE} in .env (compose.yaml passes it)")
    return [sys.executable, "-m", module or launcher(), *out]


def main(argv: list[str] | None = None) -> int:
    import runpy

    from sglang_stack.entrypoints import serve

    args = list(sys.argv[1:] if argv is None else argv)
    if flag := serve.key_on_command_line(args):
        raise UserError(f"{flag} on the command line shows in docker inspect and every process list; "
                        "write the key to a file and set SGLANG_API_KEY_FILE in .env (compose mounts it as /run/secrets/sglang_api_key)")
    try:
        key = serve.api_key()
    except serve.KeyError_ as err:
        raise UserError(str(err)) from None
    os.environ.pop("SGLANG_API_KEY", None)
    argv = router_argv(args)
    print("+ " + " ".join(argv[1:]) + (" --api-key (from the secret file)" if key else ""), flush=True)
    sys.argv = [argv[2], *argv[3:], *(["--api-key", key] if key else [])]
    runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    from sglang_stack.errors import run_main

    run_main(main)
