"""The image's HEALTHCHECK probe: is the SGLang server really generating?

    python3 -m sglang_stack.entrypoints.health [--url URL] [--timeout SECONDS]

Exit 0 only when ``URL`` answers HTTP 200 within ``SECONDS``; exit 1 for
anything else (503, another status, no answer, refused connection). Docker
keeps the one line this prints in ``docker inspect``'s health log.

Why ``/health`` and these defaults:

- In SGLang, ``/health`` answers 503 while the server is starting, then
  runs a one-token generation and waits up to ``SGLANG_HEALTH_CHECK_TIMEOUT``
  seconds (default 20) for the scheduler to answer, polling once a second
  (``sglang/srt/entrypoints/http_server.py``, ``health_generate``). A 200
  therefore means the model generated a token, not merely that the HTTP port
  is open (``/ping`` always answers 200 and proves nothing).
- So the probe's own timeout must exceed SGLang's: by default it is
  ``SGLANG_HEALTH_CHECK_TIMEOUT + 10`` seconds (30 s), and the healthcheck's
  ``timeout`` in compose.yaml must exceed that in turn, or Docker kills the
  probe first and records a failure that says nothing.
- ``/health`` bypasses ``--api-key`` in 0.5.9 (``sglang/srt/utils/auth.py``),
  but the probe sends the key when the container has one, so it keeps working if a
  later SGLang stops exempting it. It reads the key where the entrypoint does: the
  secret file (``$SGLANG_API_KEY_FILE``, default ``/run/secrets/sglang_api_key``).

Standard library only: this module runs inside the image, which has no curl.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from sglang_stack.errors import run_main
from sglang_stack.entrypoints import serve

DEFAULT_PORT = 30000
SGLANG_DEFAULT_HEALTH_TIMEOUT = 20  # SGLang's SGLANG_HEALTH_CHECK_TIMEOUT default
MARGIN_S = 10


def default_url(environ=os.environ) -> str:
    """``http://127.0.0.1:${SGLANG_STACK_PORT:-30000}/health``.

    Not ``SGLANG_PORT``: SGLang reads that one too (``get_open_port()``), and with
    tensor parallelism its message queue binds that port before the API server can.
    """
    port = environ.get("SGLANG_STACK_PORT") or str(DEFAULT_PORT)
    return f"http://127.0.0.1:{port}/health"


def default_timeout(environ=os.environ) -> float:
    """SGLang's own health timeout plus a margin, so SGLang answers first."""
    raw = environ.get("SGLANG_HEALTH_CHECK_TIMEOUT") or ""
    try:
        inner = float(raw) if raw else SGLANG_DEFAULT_HEALTH_TIMEOUT
    except ValueError:
        inner = SGLANG_DEFAULT_HEALTH_TIMEOUT
    return max(inner, SGLANG_DEFAULT_HEALTH_TIMEOUT) + MARGIN_S


@dataclass(frozen=True)
class Result:
    healthy: bool
    line: str  # one line for Docker's health log


def check(url: str, timeout: float, api_key: str | None = None) -> Result:
    """GET ``url`` once; healthy only on HTTP 200 within ``timeout`` seconds in total.

    The deadline covers the whole exchange (connect, headers, body), not each
    socket read, so a server that trickles bytes cannot hold the probe past it.
    """
    request = urllib.request.Request(url, method="GET")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    # An empty ProxyHandler: a container's HTTP_PROXY must never route the
    # probe's loopback request through a proxy.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    outcome: dict = {}

    def exchange() -> None:
        try:
            with opener.open(request, timeout=timeout) as resp:
                resp.read(1 << 16)
                outcome["status"] = resp.status
        except urllib.error.HTTPError as err:
            outcome["status"] = err.code
        except Exception as err:  # any failure is "unhealthy", reported in one line
            outcome["error"] = f"{err.__class__.__name__}: {getattr(err, 'reason', err)}"

    start = time.monotonic()
    worker = threading.Thread(target=exchange, name="health-probe", daemon=True)
    worker.start()
    worker.join(timeout)
    elapsed = time.monotonic() - start
    if worker.is_alive() or ("status" not in outcome and "timed out" in outcome.get("error", "")):
        return Result(False, f"unhealthy: GET {url}: no answer within {timeout:g}s")
    if "error" in outcome:
        return Result(False, f"unhealthy: GET {url}: {outcome['error']}")
    status = outcome["status"]
    if status == 200:
        return Result(True, f"healthy: GET {url} -> 200 in {elapsed:.1f}s")
    why = " (starting, shutting down, or the one-token generation failed)" if status == 503 else ""
    return Result(False, f"unhealthy: GET {url} -> {status}{why} in {elapsed:.1f}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m sglang_stack.entrypoints.health",
        description="Exit 0 only if SGLang's /health answers 200 (it generates one token to answer).",
    )
    parser.add_argument(
        "--url",
        default=None,
        help="URL to probe (default: http://127.0.0.1:${SGLANG_STACK_PORT:-30000}/health)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds for the whole request (default: ${SGLANG_HEALTH_CHECK_TIMEOUT:-20} + 10)",
    )
    args = parser.parse_args(argv)
    timeout = args.timeout if args.timeout is not None else default_timeout()
    if not 0 < timeout < float("inf"):
        parser.error(f"--timeout must be a positive number of seconds, got {timeout:g}")
    if args.url is not None:
        parts = urllib.parse.urlsplit(args.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            parser.error(f"--url {args.url!r}: not an http:// or https:// URL with a host")
    try:
        key = serve.api_key()
    except serve.KeyError_:
        key = None  # the server refuses to start on such a file; its /health needs no key in 0.5.9
    result = check(args.url or default_url(), timeout, key)
    print(result.line, flush=True)
    return 0 if result.healthy else 1


if __name__ == "__main__":
    run_main(main)
