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
