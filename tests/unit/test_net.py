"""``veeksha.net.fetch`` against a canned raw-socket server in a thread: bodies by length, by
chunks and until close; each malformed answer is one ``TargetError``; redirects stay on their
origin. (The whole-exchange deadline is proved against a byte-a-second server process in
``tests/integration/hostile/test_probe.py``.)"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from veeksha.errors import ConfigurationError, TargetError
from veeksha.net import TIMEOUT_ENV, fetch, origin, setup_timeout

KEY = "sk-unit-0123456789abcdefghijklmnop"


class _Canned:
    """Answers the n-th connection with ``answers[n]`` (bytes, sent whole, then closed)."""

    def __init__(self, answers: list[bytes]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        for i in range(len(self.answers)):
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            answer = self.answers[i]  # (read now: a test may set it once it knows the port)
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        while len(body) < int(line.split(b":")[1]):
                            body += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + body)
                conn.sendall(answer)


@contextmanager
def canned(*answers: bytes) -> Iterator[_Canned]:
    server = _Canned(list(answers))
    server._thread.start()
    try:
        yield server
    finally:
        server._sock.close()
        server._thread.join(5)


def _json(status: int, obj: object, extra: str = "") -> bytes:
    body = json.dumps(obj).encode()
    return f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def test_a_json_answer_with_a_length() -> None:
    with canned(_json(200, {"data": [{"id": "m"}]})) as server:
        answer = fetch("GET", server.url + "/v1/models", api_key=KEY)
    assert answer.ok
    assert answer.json() == {"data": [{"id": "m"}]}
    head = server.requests[0].decode()
    assert head.startswith("GET /v1/models HTTP/1.1\r\n")
    assert f"Authorization: Bearer {KEY}\r\n" in head


def test_a_chunked_answer_and_one_read_until_close() -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunked += b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    until_close = b"HTTP/1.1 200 OK\r\n\r\nall of it"
    with canned(chunked, until_close) as server:
        assert fetch("GET", server.url).body == b"abcde"
        assert fetch("GET", server.url).body == b"all of it"


@pytest.mark.parametrize(
    ("answer", "what"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "cut short (3 of 10 bytes"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nabc", "cut short"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "cut short"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length is not a number"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "not a number"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", "larger than 1,000 bytes"),
        (b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 5000, "larger than 1,000 bytes"),
        (b"HTTP/1.1 abc OK\r\n\r\n", "not HTTP"),
        (b"", "closed the connection without answering"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 200 + b"\r\n", "not valid HTTP (HTTPException"),
    ],
)
def test_each_malformed_answer_is_one_target_error(answer: bytes, what: str) -> None:
    with canned(answer) as server, pytest.raises(TargetError) as info:
        fetch("GET", server.url + "/x", max_body=1000, fix="Fix it")
    message = str(info.value)
    assert message.startswith(f"GET {server.url}/x: "), message
    assert what in message
    assert message.endswith(". Fix it")
    assert "\n" not in message


def test_what_the_server_sent_is_quoted_masked() -> None:
    answer = f"SSH-2.0 {'p' * 40}{KEY}\r\n\r\n".encode()
    with canned(answer) as server, pytest.raises(TargetError) as info:
        fetch("GET", server.url, api_key=KEY)
    message = str(info.value)
    assert "the answer is not HTTP (it began 'SSH-2.0 ppp" in message
    assert KEY[3:11] not in message
    assert KEY[-8:] not in message


def test_refused_and_not_http_urls() -> None:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
    with pytest.raises(TargetError, match="Connection refused"):
        fetch("GET", f"http://127.0.0.1:{port}/v1/models")
    with pytest.raises(TargetError, match="not an http"):
        fetch("GET", "ftp://127.0.0.1/v1/models")


def test_a_same_origin_307_keeps_the_method_the_body_and_the_key() -> None:
    redirect = b"HTTP/1.1 307 T\r\nLocation: /elsewhere?x=1\r\nContent-Length: 0\r\n\r\n"
    with canned(redirect, _json(200, {"tokens": [1]})) as server:
        answer = fetch("POST", server.url + "/tokenize", json_body={"prompt": "a"}, api_key=KEY)
    assert answer.json() == {"tokens": [1]}
    assert answer.url == server.url + "/elsewhere?x=1"
    second = server.requests[1].decode()
    assert second.startswith("POST /elsewhere?x=1 HTTP/1.1\r\n")
    assert f"Authorization: Bearer {KEY}" in second
    assert second.endswith('{"prompt": "a"}')


def test_a_303_continues_as_a_get_without_the_body() -> None:
    redirect = b"HTTP/1.1 303 S\r\nLocation: /result\r\nContent-Length: 0\r\n\r\n"
    with canned(redirect, _json(200, {})) as server:
        fetch("POST", server.url + "/tokenize", json_body={"prompt": "a"}, api_key=KEY)
    second = server.requests[1].decode()
    assert second.startswith("GET /result HTTP/1.1\r\n")
    assert "Content-Length" not in second


@pytest.mark.parametrize(
    "location",
    [
        "http://127.0.0.1:{other}/v1/models",  # another port
        "https://127.0.0.1:{port}/v1/models",  # another scheme
        "http://localhost:{port}/v1/models",  # another host name
        "//evil.example/v1/models",
    ],
)
def test_a_redirect_to_another_origin_is_not_followed(location: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as other:
        with canned(b"") as server:
            target = location.format(other=other.getsockname()[1], port=server.port)
            redirect = f"HTTP/1.1 307 T\r\nLocation: {target}\r\nContent-Length: 0\r\n\r\n"
            server.answers[0] = redirect.encode()
            with pytest.raises(TargetError, match=r"redirected \(HTTP 307\) to .*not followed"):
                fetch("GET", server.url + "/v1/models", api_key=KEY)
        other.setblocking(False)
        with pytest.raises(BlockingIOError):
            other.accept()  # nobody connected there
    assert len(server.requests) == 1


def test_a_redirect_loop_ends() -> None:
    redirect = b"HTTP/1.1 302 F\r\nLocation: /again\r\nContent-Length: 0\r\n\r\n"
    with canned(*[redirect] * 6) as server, pytest.raises(TargetError, match="more than 5"):
        fetch("GET", server.url + "/again")
    assert len(server.requests) == 6


def test_origins() -> None:
    assert origin("http://Host/v1") == ("http", "host", 80)
    assert origin("https://host/v1") == ("https", "host", 443)
    assert origin("http://host:80/x") == origin("http://host/y")
    assert origin("http://host:8000") != origin("http://host:8001")


def test_the_setup_timeout_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert setup_timeout(5.0) == 5.0
    monkeypatch.setenv(TIMEOUT_ENV, "0.5")
    assert setup_timeout(5.0) == 0.5
    for bad in ("abc", "0", "-1", "nan"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(ConfigurationError, match=TIMEOUT_ENV):
            setup_timeout(5.0)


def test_a_body_that_is_not_json() -> None:
    with canned(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n<html", _json(200, [[[1]]])) as s:
        with pytest.raises(ValueError):  # noqa: PT011 - json's own message
            fetch("GET", s.url).json()
        assert fetch("GET", s.url).json() == [[[1]]]


def test_a_silent_tls_handshake_is_a_timeout() -> None:
    """The TLS handshake keeps to the deadline too (a server that accepts and says nothing)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"https://127.0.0.1:{silent.getsockname()[1]}/v1/models"
        with pytest.raises(TargetError, match=r"no complete answer within 0\.3 s"):
            fetch("GET", url, timeout_s=0.3)
