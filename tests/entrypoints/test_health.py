"""The HEALTHCHECK probe against a real HTTP server on loopback.

The server answers the way SGLang's /health does over a container's
life: 200 once it generates, 503 while it starts (or when the one-token
generation fails), and, when the scheduler is wedged, nothing at all.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import image_layout

from sglang_stack import ROOT
from sglang_stack.entrypoints import health

HEALTH_PY = ROOT / "sglang_stack" / "entrypoints" / "health.py"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # the name http.server calls
        state = self.server.state
        state["requests"].append({"path": self.path, "authorization": self.headers.get("Authorization")})
        mode = state["mode"]
        if mode == "hang":
            state["release"].wait(30)
            return
        if mode == "trickle":  # headers at once, then one body byte every 0.5 s
            self.send_response(200)
            self.send_header("Content-Length", "60")
            self.end_headers()
            for _ in range(60):
                if state["release"].wait(0.5):
                    return
                self.wfile.write(b"x")
                self.wfile.flush()
            return
        self.send_response(mode)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture
def server():
    """A loopback HTTP server whose /health answer the test sets via state['mode']."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.state = {"mode": 200, "requests": [], "release": threading.Event()}
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.state["release"].set()
        httpd.shutdown()
        httpd.server_close()


def url_of(httpd) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}/health"


def run_probe(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the probe the way Docker's HEALTHCHECK does: a fresh interpreter, exit code read."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    full_env["PYTHONPATH"] = str(ROOT)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "sglang_stack.entrypoints.health", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd="/",
    )


def test_200_then_503_then_hang(server):
    url = url_of(server)

    server.state["mode"] = 200
    ok = run_probe("--url", url, "--timeout", "5")
    assert ok.returncode == 0, f"HTTP 200 must be healthy (exit 0); got {ok.returncode}: {ok.stdout}{ok.stderr}"
    assert ok.stdout.startswith("healthy:"), f"the probe's one line should say healthy: {ok.stdout!r}"

    server.state["mode"] = 503
    starting = run_probe("--url", url, "--timeout", "5")
    assert starting.returncode == 1, f"HTTP 503 must be unhealthy (exit 1); got {starting.returncode}"
    assert "503" in starting.stdout, f"the probe's line should name the status: {starting.stdout!r}"

    server.state["mode"] = "hang"
    began = time.monotonic()
    hung = run_probe("--url", url, "--timeout", "1.5")
    took = time.monotonic() - began
    assert hung.returncode == 1, f"a server that never answers must be unhealthy (exit 1); got {hung.returncode}"
    assert "no answer within 1.5s" in hung.stdout, f"the probe should say it gave up: {hung.stdout!r}"
    # The handler holds the request for 30 s; finishing well before that proves the
    # probe enforced its own deadline instead of waiting for the server.
    assert took < 15, f"the probe waited {took:.1f}s for a hung server despite --timeout 1.5"
    assert len(server.state["requests"]) == 3, f"expected one GET per probe run: {server.state['requests']}"


def test_deadline_covers_a_trickling_answer(server):
    """Each byte arrives within the socket timeout; only a whole-request deadline stops it."""
    server.state["mode"] = "trickle"
    began = time.monotonic()
    result = health.check(url_of(server), 1.5)
    took = time.monotonic() - began
    assert not result.healthy, f"an answer still arriving at the deadline must be unhealthy: {result.line}"
    assert took < 10, f"the probe followed a trickling body for {took:.1f}s despite a 1.5 s deadline"


def test_other_statuses_are_unhealthy(server):
    for status in (204, 401, 404, 500):
        server.state["mode"] = status
        result = health.check(url_of(server), 5)
        assert not result.healthy, f"HTTP {status} must not count as healthy: {result.line}"
        assert str(status) in result.line, f"the line should name HTTP {status}: {result.line}"


def test_refused_connection_is_unhealthy():
    import socket

    with socket.socket() as sock:  # a port that nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_probe("--url", f"http://127.0.0.1:{port}/health", "--timeout", "5")
    assert result.returncode == 1, f"a refused connection must exit 1, got {result.returncode}"
    assert "Traceback" not in result.stderr, f"a refused connection must not print a traceback: {result.stderr}"
    assert result.stdout.startswith("unhealthy:"), f"expected one 'unhealthy:' line: {result.stdout!r}"


def test_defaults_come_from_the_probes_own_port_setting(server):
    """With no arguments (the image's HEALTHCHECK), the URL comes from SGLANG_STACK_PORT."""
    port = str(server.server_address[1])
    result = run_probe(env={"SGLANG_STACK_PORT": port})
    assert result.returncode == 0, f"no-argument probe with SGLANG_STACK_PORT={port} should reach the server: {result.stdout}"
    assert server.state["requests"][-1]["path"] == "/health", f"the default path must be /health: {server.state['requests']}"


def test_default_url_and_timeout():
    assert health.default_url({}) == "http://127.0.0.1:30000/health", "default port must be SGLang's 30000"
    assert health.default_url({"SGLANG_STACK_PORT": "31000"}) == "http://127.0.0.1:31000/health", "SGLANG_STACK_PORT must set the port"
    assert health.default_url({"SGLANG_PORT": "31000"}) == "http://127.0.0.1:30000/health", \
        "SGLANG_PORT is SGLang's (get_open_port), never the probe's"
    assert health.default_timeout({}) == 30, "default timeout must be SGLang's 20 s plus 10"
    assert health.default_timeout({"SGLANG_HEALTH_CHECK_TIMEOUT": "45"}) == 55, "a raised SGLang timeout must raise the probe's"
    assert health.default_timeout({"SGLANG_HEALTH_CHECK_TIMEOUT": "5"}) > 20, "the probe must never undercut 20 s"
    assert health.default_timeout({"SGLANG_HEALTH_CHECK_TIMEOUT": "junk"}) == 30, "junk falls back to the default"


def test_api_key_header_sent_from_the_secret_file(server, tmp_path):
    """The key compose mounts as a file (what the entrypoint reads); an environment variable is never read."""
    key_file = tmp_path / "sglang_api_key"
    key_file.write_text("k-123\n")
    run_probe("--url", url_of(server), "--timeout", "5", env={"SGLANG_API_KEY_FILE": str(key_file)})
    run_probe("--url", url_of(server), "--timeout", "5", env={"SGLANG_API_KEY": "from-the-environment"})
    with_key, without_key = server.state["requests"]
    assert with_key["authorization"] == "Bearer k-123", f"the secret file's key should be sent as a bearer token: {with_key}"
    assert without_key["authorization"] is None, f"no Authorization header without a key file: {without_key}"


def test_proxy_variables_are_ignored(server):
    """A container's HTTP_PROXY must not swallow the loopback probe."""
    dead_proxy = "http://127.0.0.1:9"  # discard port: nothing answers there
    env = {"http_proxy": dead_proxy, "HTTP_PROXY": dead_proxy, "no_proxy": "", "NO_PROXY": ""}
    result = run_probe("--url", url_of(server), "--timeout", "5", env=env)
    assert result.returncode == 0, f"the probe went through the proxy instead of loopback: {result.stdout}"


@pytest.mark.parametrize("args, says", [
    (["--timeout", "0"], "--timeout must be a positive number of seconds, got 0"),
    (["--timeout", "nan"], "--timeout must be a positive number of seconds, got nan"),
    (["--url", "notaurl"], "--url 'notaurl': not an http:// or https:// URL with a host"),
    (["--url", "http://"], "--url 'http://': not an http:// or https:// URL with a host"),
])
def test_a_bad_flag_is_one_line_error(args, says):
    result = run_probe(*args)
    assert result.returncode == 2, f"{args} should be a usage error (exit 2), got {result.returncode}"
    assert "Traceback" not in result.stderr, f"no traceback for bad input: {result.stderr}"
    assert result.stderr.strip().splitlines()[-1].endswith(f"error: {says}"), f"the error names the flag: {result.stderr}"


def test_probe_runs_from_a_bare_copy(tmp_path: Path, server):
    """The image's copy of the package (docker/Dockerfile's COPY lines), run with -S -E (no site-packages)."""
    image_layout.install(tmp_path)
    result = subprocess.run(
        [sys.executable, "-S", "-E", "-m", "sglang_stack.entrypoints.health", "--url", url_of(server), "--timeout", "5"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"the probe needs something beyond the standard library: {result.stderr}"
