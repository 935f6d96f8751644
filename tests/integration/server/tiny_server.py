"""A tiny stand-in for an inference server, started by the managed-server tests.

``python tiny_server.py PORT [--no-health] [--child] [--ignore-term] [--metrics FILE]``: answers
GET /health (404 with --no-health), /v1/models and /metrics (the text of FILE, or 404 without
it); --child starts a ``sleep`` child first and prints its pid (``child pid N``); --ignore-term
ignores SIGTERM (the owner must SIGKILL it).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

ARGS = sys.argv[1:]


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, body = 404, b"not found"
        if self.path == "/health" and "--no-health" not in ARGS:
            status, body = 200, b"ok"
        elif self.path == "/v1/models":
            status, body = 200, b'{"data": [{"id": "tiny"}]}'
        elif self.path == "/metrics" and "--metrics" in ARGS:
            status, body = 200, Path(ARGS[ARGS.index("--metrics") + 1]).read_bytes()
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    if "--ignore-term" in ARGS:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "--child" in ARGS:
        child = subprocess.Popen(["sleep", "300"])
        print(f"child pid {child.pid}", flush=True)
    print("tiny server up", flush=True)
    HTTPServer(("127.0.0.1", int(ARGS[0])), Handler).serve_forever()
