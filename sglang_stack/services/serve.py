"""The image's entrypoint: SGLang's launch_server, with the API key from a secret file, never from a command line.

    python3 -m sglang_stack.services.serve [launch_server's arguments]

A key written as ``--api-key=...`` in a container's command shows in ``docker inspect``,
``docker compose config``, a pod's spec, and the process list of the host. So the key is a
file: ``$SGLANG_API_KEY_FILE``, by default ``/run/secrets/sglang_api_key`` (what compose.yaml's
secret and the Kubernetes render mount). It reaches SGLang through this process's own
``sys.argv``: SGLang runs in this process (``runpy``), whose command line, as
``/proc/PID/cmdline`` shows it, stays the one the container started with; SGLang's workers are
started by multiprocessing's spawn, whose command line carries no argument of ours. An empty or
missing file means no key. A key given on the command line anyway is refused, and
``SGLANG_API_KEY`` is dropped from the environment SGLang and its workers inherit. Patch 0005
keeps the key out of SGLang's own ``server_args=`` log line.

``SGLANG_STACK_SERVER`` names the module to run (default ``sglang.launch_server``).
Stdlib only: it runs inside the image.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

DEFAULT_KEY_FILE = "/run/secrets/sglang_api_key"
SERVER = "sglang.launch_server"
KEY_FLAGS = ("--api-key", "--admin-api-key")


class KeyError_(Exception):
    """A key file that exists but cannot be used; the message is the one line to print."""


def api_key(environ=os.environ) -> str | None:
    """The key in ``$SGLANG_API_KEY_FILE`` (default the compose/Kubernetes secret), or None."""
    path = Path(environ.get("SGLANG_API_KEY_FILE") or DEFAULT_KEY_FILE)
    if not path.exists():
        if environ.get("SGLANG_API_KEY_FILE"):
            raise KeyError_(f"SGLANG_API_KEY_FILE={path}: no such file")
        return None
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise KeyError_(f"{path}: cannot read the API key ({err.__class__.__name__}); the container runs as uid {os.getuid()}") from None
    if any(c.isspace() for c in key):
        raise KeyError_(f"{path}: the API key contains whitespace; use one word (e.g. `openssl rand -base64 32`)")
    return key or None


def key_on_command_line(argv: list[str]) -> str | None:
    """The first flag in ``argv`` that would put a key on the command line."""
    return next((a.split("=", 1)[0] for a in argv if a.split("=", 1)[0] in KEY_FLAGS), None)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if flag := key_on_command_line(args):
        print(f"error: {flag} on the command line shows in docker inspect and every process list; set "
              "SGLANG_API_KEY in .env (compose passes it as the secret file /run/secrets/sglang_api_key)", file=sys.stderr)
        return 2
    try:
        key = api_key()
    except KeyError_ as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    os.environ.pop("SGLANG_API_KEY", None)
    module = os.environ.get("SGLANG_STACK_SERVER") or SERVER
    print(f"serve: {module} {' '.join(args)}" + (" --api-key (from the secret file)" if key else ""), flush=True)
    sys.argv = [module, *args, *(["--api-key", key] if key else [])]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
