"""A real HTTP server on 127.0.0.1 for one test: the handler class decides every answer."""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    """A quiet handler with a JSON reply: subclass it and write ``do_GET``."""

    def reply(self, code: int, body, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        for key, value in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]):
    """``http://127.0.0.1:PORT`` while the block runs; the server is shut down after it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def impersonating(host: str, handler: type[BaseHTTPRequestHandler], workdir):
    """A loopback HTTPS proxy that answers for ``https://HOST`` itself, with ``handler``, for a tool whose URL is
    fixed (pip-audit's PyPI service asks https://pypi.org and has no option for another index). Yields the
    environment that sends a client there: HTTPS_PROXY, and REQUESTS_CA_BUNDLE naming a CA made for this block."""
    import socketserver
    import ssl
    import subprocess
    from pathlib import Path

    d = Path(workdir)
    ca, key = d / "ca.pem", d / "host.key"

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=loopback test CA",
            "-keyout", d / "ca.key", "-out", ca)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={host}", "-keyout", key, "-out", d / "host.csr")
    (d / "ext").write_text(f"subjectAltName=DNS:{host}\n")
    openssl("x509", "-req", "-in", d / "host.csr", "-CA", ca, "-CAkey", d / "ca.key", "-CAcreateserial", "-days", "1",
            "-extfile", d / "ext", "-out", d / "host.pem")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(d / "host.pem", key)

    class Proxy(socketserver.StreamRequestHandler):
        def handle(self):
            line = self.rfile.readline().decode()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            if not line.startswith(f"CONNECT {host}:443 "):
                self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            self.wfile.flush()
            with tls.wrap_socket(self.connection, server_side=True) as inner:
                handler(inner, self.client_address, self.server)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Proxy)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield {"HTTPS_PROXY": f"http://127.0.0.1:{server.server_address[1]}", "REQUESTS_CA_BUNDLE": str(ca)}
    finally:
        server.shutdown()
        server.server_close()
