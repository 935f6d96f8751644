"""A server without ``/models`` whose chat completions work, as some OpenAI-compatible servers
and gateways are: ``python no_models_server.py PORT``. Every GET is a JSON 404; ``POST
/v1/chat/completions`` answers a one-token chat completion (200) to a body naming the model
``m`` and ``max_completion_tokens`` 1 (else 400: the test checks what the start-up's one
request sends), and prints each POST's body on stdout."""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Handler(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        sent = json.loads(self.rfile.read(int(self.headers["content-length"])))
        print(json.dumps(sent), flush=True)
        if self.path != "/v1/chat/completions":
            self._answer(404, {"detail": "Not Found"})
        elif sent.get("model") != "m" or sent.get("max_completion_tokens") != 1:
            self._answer(400, {"error": {"message": "bad request"}})
        else:
            message = {"role": "assistant", "content": "Hi"}
            usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            self._answer(200, {"choices": [{"index": 0, "message": message}], "usage": usage})

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    print("up", flush=True)
    HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
