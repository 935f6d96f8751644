"""Answers veeksha did not ask for, read by the worker's ``_Exchange`` (no socket, no loop run):
compressed bodies despite ``Accept-Encoding: identity``, and a JSON answer to a streamed request.
The same cases run for real against the hostile server in tests/integration/hostile/test_held.py.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import zlib
from collections.abc import Iterator

import pytest

from veeksha.dispatch.messages import Result, WorkItem
from veeksha.dispatch.openai import ResponseError
from veeksha.dispatch.settings import WorkerSettings
from veeksha.dispatch.worker import Worker, _Exchange

SSE = b"".join(
    b'data: {"choices":[{"index":0,"delta":{"content":"t%d "}}]}\n\n' % i for i in range(3)
) + (b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}\n\ndata: [DONE]\n\n')
COMPLETION = json.dumps(
    {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "t0 t1 t2 "}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3},
    }
).encode()


@pytest.fixture
def worker() -> Iterator[Worker]:
    left, right = socket.socketpair()
    settings = WorkerSettings(endpoint="http://127.0.0.1:9/v1/chat/completions", max_retries=1)
    w = Worker(0, settings, left)
    results: list[Result] = []
    w._emit = results.append  # type: ignore[method-assign]
    w.results = results  # type: ignore[attr-defined]
    loop = w._loop = asyncio.new_event_loop()
    yield w
    loop.close()
    left.close()
    right.close()


def exchange(worker: Worker, *, stream: bool = True) -> _Exchange:
    worker.settings.stream = stream
    ex = _Exchange(worker, None, WorkItem(1, [("user", "hi")], 3, 0), 0)  # type: ignore[arg-type]
    ex.on_sent(10)
    return ex


def respond(ex: _Exchange, status: int, headers: dict[bytes, bytes], reads: list[bytes]) -> None:
    ex.on_head(status, headers)
    for i, data in enumerate(reads):
        ex.on_data(data, 100 + i)
    ex.on_end(None)


def result(worker: Worker) -> Result:
    results: list[Result] = worker.results  # type: ignore[attr-defined]
    assert len(results) == 1
    return results[0]


def test_the_worker_asks_for_no_compression(worker: Worker) -> None:
    assert worker._headers["Accept-Encoding"] == "identity"


def test_gzip_stream_flushed_per_event_is_decoded_read_by_read(worker: Worker) -> None:
    compressor = zlib.compressobj(wbits=31)
    reads = [
        compressor.compress(event + b"\n\n") + compressor.flush(zlib.Z_SYNC_FLUSH)
        for event in SSE.split(b"\n\n")[:-1]
    ] + [compressor.flush()]
    ex = exchange(worker)
    respond(ex, 200, {b"content-encoding": b"gzip"}, reads)
    res = result(worker)
    assert (res.status, res.output_text, res.completion_tokens) == ("ok", "t0 t1 t2 ", 3)
    assert res.chunk_times_ns == [100, 101, 102]  # one read each: the times of their reads


def test_gzip_stream_cut_anywhere_gives_the_same_answer(worker: Worker) -> None:
    body = gzip.compress(SSE)
    ex = exchange(worker)
    respond(
        ex, 200, {b"content-encoding": b"GZIP"}, [body[i : i + 3] for i in range(0, len(body), 3)]
    )
    assert result(worker).output_text == "t0 t1 t2 "


def test_deflate_non_streamed_body(worker: Worker) -> None:
    body = zlib.compress(COMPLETION)
    ex = exchange(worker, stream=False)
    respond(ex, 200, {b"content-encoding": b"deflate"}, [body[:7], body[7:]])
    res = result(worker)
    assert (res.status, res.output_text, res.completion_tokens) == ("ok", "t0 t1 t2 ", 3)


def test_json_answer_to_a_streamed_request_is_the_whole_answer(worker: Worker) -> None:
    ex = exchange(worker)
    headers = {b"content-type": b"application/json; charset=utf-8"}
    respond(ex, 200, headers, [COMPLETION[:20], COMPLETION[20:]])
    res = result(worker)
    assert (res.status, res.output_text, res.completion_tokens) == ("ok", "t0 t1 t2 ", 3)
    assert res.first_chunk_at_ns == res.completed_at_ns == 101
    assert res.chunk_times_ns == [101]


def test_json_error_object_in_a_200_to_a_stream_is_the_servers_error(worker: Worker) -> None:
    ex = exchange(worker)
    body = json.dumps({"error": {"message": "busy", "code": 503}}).encode()
    respond(ex, 200, {b"content-type": b"application/json"}, [body])
    res = result(worker)
    assert (res.status, res.error_kind) == ("error", "http_5xx")


def test_an_event_stream_is_still_a_stream(worker: Worker) -> None:
    ex = exchange(worker)
    respond(ex, 200, {b"content-type": b"text/event-stream"}, [SSE])
    assert result(worker).output_text == "t0 t1 t2 "


def test_an_encoding_veeksha_cannot_decode_is_malformed(worker: Worker) -> None:
    ex = exchange(worker)
    with pytest.raises(ResponseError, match="answer compressed with br") as raised:
        ex.on_head(200, {b"content-encoding": b"br"})  # (Http1Pool hands it to on_end)
    assert raised.value.kind == "malformed_response"


def test_a_corrupt_gzip_stream_is_malformed(worker: Worker) -> None:
    ex = exchange(worker)
    ex.on_head(200, {b"content-encoding": b"gzip"})
    with pytest.raises(ResponseError, match="compressed stream") as raised:
        ex.on_data(b"not gzip at all", 100)
    assert raised.value.kind == "malformed_response"


def test_a_corrupt_gzip_body_is_malformed(worker: Worker) -> None:
    ex = exchange(worker, stream=False)
    respond(ex, 200, {b"content-encoding": b"gzip"}, [b"not gzip at all"])
    res = result(worker)
    assert (res.status, res.error_kind) == ("error", "malformed_response")
    assert "compressed body" in res.error_message


def test_error_bodies_keep_their_snippet_compressed_or_not(worker: Worker) -> None:
    ex = exchange(worker)
    respond(ex, 400, {b"content-encoding": b"gzip"}, [gzip.compress(b'{"error": "bad"}')])
    assert result(worker).error_message == 'HTTP 400: {"error": "bad"}'
    worker.results.clear()  # type: ignore[attr-defined]
    ex = exchange(worker)
    respond(ex, 400, {b"content-encoding": b"br"}, [b"raw"])
    res = result(worker)
    assert (res.error_kind, res.error_message) == ("http_4xx", "HTTP 400: raw")


def test_a_retry_forgets_the_last_attempts_encoding(worker: Worker) -> None:
    ex = exchange(worker)
    respond(ex, 429, {b"content-encoding": b"gzip", b"retry-after": b"0"}, [gzip.compress(b"{}")])
    assert worker.results == []  # type: ignore[attr-defined]
    assert ex.retries == 1
    assert ex.inflate is None
    assert ex.feed == ex.acc.feed
    assert ex.retry_timer is not None
    ex.retry_timer.cancel()
    respond(ex, 200, {}, [SSE])
    res = result(worker)
    assert (res.status, res.output_text, res.retries) == ("ok", "t0 t1 t2 ", 1)
