"""The worker masks the key in every error message before cutting it (``Worker._result``), and
reads enough of an error body (``_read_window``, the https path) for the key to be whole."""

from __future__ import annotations

import asyncio
import socket
from unittest import mock

from aiohttp import StreamReader

from veeksha.dispatch.messages import WorkItem
from veeksha.dispatch.openai import ResponseAccumulator
from veeksha.dispatch.settings import WorkerSettings
from veeksha.dispatch.worker import _MESSAGE_CHARS, Worker, _read_window
from veeksha.redact import READ_WINDOW

KEY = "sk-worker-0123456789abcdefghijklmnopq"


def _message(worker: Worker, message: str) -> str:
    item = WorkItem(request_id=1, messages=[], max_tokens=1, dispatched_at_ns=0)
    acc = ResponseAccumulator(True)
    result = worker._result(
        worker._routes[0], item, 1, 2, 3, acc, 500, 0, "error", "http_5xx", message
    )
    return result.error_message


def test_the_key_is_masked_before_the_message_is_cut() -> None:
    settings = WorkerSettings(endpoint="http://127.0.0.1:1/v1/chat/completions", api_key=KEY)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        worker = Worker(0, settings, ours)
        for pad in range(_MESSAGE_CHARS - len(KEY) - 5, _MESSAGE_CHARS + 1):
            shown = _message(worker, "p" * pad + KEY + " tail")
            assert shown == ("p" * pad + "***" + " tail")[:_MESSAGE_CHARS]
            assert KEY[3:11] not in shown
            assert KEY[-8:] not in shown
        assert _message(worker, "x" * 5000) == "x" * _MESSAGE_CHARS


def test_an_error_body_is_read_up_to_the_window() -> None:
    async def read(pieces: list[bytes]) -> bytes:
        stream = StreamReader(
            mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop()
        )
        for piece in pieces:
            stream.feed_data(piece)
        stream.feed_eof()
        return await _read_window(stream)

    assert asyncio.run(read([b"HTTP", b" body ", b"in pieces"])) == b"HTTP body in pieces"
    assert asyncio.run(read([b"x" * 50_000, b"y" * 50_000])) == (
        b"x" * 50_000 + b"y" * (READ_WINDOW - 50_000)
    )
