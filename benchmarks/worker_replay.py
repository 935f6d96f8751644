"""The worker's CPU per streamed response, in-process and repeatable: recorded reads replayed.

    python -m benchmarks.worker_replay capture [--chat] [--output-tokens 32] FILE
    python -m benchmarks.worker_replay replay FILE [--responses 2000] [--split]
        [--session-header X-Session-Id] [--request-id-header X-Request-Id]
    valgrind --tool=callgrind python -m benchmarks.worker_replay replay FILE --responses N

``capture`` sends one streaming request to the built-in simulator (fast preset, which writes a
whole response at once) over a plain socket and stores the response's bytes as the socket gave
them. ``replay`` drives the worker's own objects with those bytes, as a worker does per request:
an ``_Exchange`` started on an ``Http1Pool`` connection (whose transport only counts writes),
``data_received`` per read, the Result built, and every 16 Results encoded into one frame. No
socket, timer or event loop: what is left is the worker's per-response Python and C work, the
same for every run, so two callgrind runs (``--responses`` N and 0) give the instructions of one
response by difference. ``--split`` delivers every SSE event in its own read (a server that
writes each token as it is made) instead of the recorded reads. ``--session-header`` sends
each request with that header carrying its session id (``client.session_header``);
``--request-id-header`` with that one carrying a run's prefix and its id
(``client.request_id_header``); their price is the difference to a replay without them.
"""

from __future__ import annotations

import argparse
import pickle
import socket
import time
from pathlib import Path
from typing import Any

from veeksha.dispatch.channel import encode_frame
from veeksha.dispatch.http1 import Http1Pool, _Conn
from veeksha.dispatch.messages import WorkItem
from veeksha.dispatch.openai import RequestBuilder
from veeksha.dispatch.settings import WorkerSettings
from veeksha.dispatch.worker import Worker

PROMPT = " ".join(f"word{i % 50}" for i in range(128))


def capture(chat: bool, output_tokens: int, path: Path) -> None:
    """Store one response's reads (and whether it is chat) in ``path``."""
    from veeksha.scenario.simulator import SimulatorConfig
    from veeksha.simulator.process import SimulatorProcess

    with SimulatorProcess(SimulatorConfig.model_validate({"preset": "fast"})) as sim:
        assert sim.base_url is not None
        host, port = sim.base_url.split("//")[1].split("/")[0].split(":")
        route = "/v1/chat/completions" if chat else "/v1/completions"
        body = RequestBuilder(
            chat=chat, model="veeksha-sim", stream=True, max_tokens_param="max_tokens"
        ).body([("user", PROMPT)], output_tokens)
        head = (
            f"POST {route} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        reads: list[bytes] = []
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(head.encode() + body)
            while not b"".join(reads).endswith(b"\r\n0\r\n\r\n"):
                data = sock.recv(1 << 20)
                if not data:
                    break
                reads.append(data)
    path.write_bytes(pickle.dumps({"chat": chat, "reads": reads}))
    print(f"{len(reads)} read(s), {sum(map(len, reads))} bytes → {path}")


def _split(reads: list[bytes]) -> list[bytes]:
    """The recorded response re-framed as one HTTP chunk (one read) per SSE event."""
    data = b"".join(reads)
    end = data.index(b"\r\n\r\n") + 4
    head, body, pos = data[:end], b"", end
    while True:
        eol = data.index(b"\r\n", pos)
        size = int(data[pos:eol], 16)
        if size == 0:
            break
        body += data[eol + 2 : eol + 2 + size]
        pos = eol + 2 + size + 2
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e]
    out = [head]
    out += [b"%x\r\n%b\r\n" % (len(e), e) for e in events]
    out.append(b"0\r\n\r\n")
    return out


class _Timer:
    def cancel(self) -> None:
        pass


class _NoLoop:
    """The loop calls an exchange makes: its timeout timer and the Results' flush."""

    def call_later(self, delay: float, callback: Any, *args: Any) -> _Timer:
        return _Timer()

    def call_at(self, when: float, callback: Any, *args: Any) -> _Timer:
        return _Timer()

    def time(self) -> float:
        return time.monotonic()

    def call_soon(self, callback: Any, *args: Any) -> None:
        pass


class _CountingTransport:
    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def close(self) -> None:
        pass


def offline_worker(
    settings: WorkerSettings,
) -> tuple[Worker, Http1Pool, _Conn, tuple[socket.socket, socket.socket]]:
    """A ``Worker`` with one idle keep-alive connection whose transport only counts writes, and
    no event loop: responses are fed to the connection's ``data_received`` by hand."""
    a, b = socket.socketpair()
    worker = Worker(0, settings, a)
    pool = Http1Pool(settings.endpoint, {"User-Agent": "veeksha"})
    worker._http = pool
    worker._loop = _NoLoop()  # type: ignore[assignment]
    conn = _Conn(pool)
    conn.connection_made(_CountingTransport())  # type: ignore[arg-type]
    pool._idle.append(conn)
    return worker, pool, conn, (a, b)


#: a request id's prefix as a run's is (``request_id_prefix``): its folder's name and a hyphen
ID_PREFIX = "20261127T200339Z-fda33e11ce-"


def replay(
    path: Path,
    responses: int,
    split: bool,
    session_header: str = "",
    request_id_header: str = "",
) -> list[Any]:
    """Feed the recorded response ``responses`` times; return the Results (the last 16 kept)."""
    saved = pickle.loads(path.read_bytes())
    reads: list[bytes] = _split(saved["reads"]) if split else saved["reads"]
    settings = WorkerSettings(
        endpoint="http://127.0.0.1:9/v1/"
        + ("chat/completions" if saved["chat"] else "completions"),
        model="veeksha-sim",
        chat=saved["chat"],
        max_tokens_param="max_tokens",
        session_header=session_header,
        request_id_header=request_id_header,
        request_id_prefix=ID_PREFIX if request_id_header else "",
    )
    worker, _, conn, (a, b) = offline_worker(settings)
    last: list[Any] = []
    messages = [("user", PROMPT)]
    for i in range(responses):
        worker._start_http1(
            worker._routes[0],
            WorkItem(i, list(messages), 32, 0, session=i // 4),
            time.monotonic_ns(),
        )
        for read in reads:
            conn.data_received(read)
        if len(worker._outbox) >= 16:
            last, worker._outbox = worker._outbox, []
            encode_frame(last)
    a.close()
    b.close()
    return last or worker._outbox


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture")
    cap.add_argument("file", type=Path)
    cap.add_argument("--chat", action="store_true")
    cap.add_argument("--output-tokens", type=int, default=32)
    rep = sub.add_parser("replay")
    rep.add_argument("file", type=Path)
    rep.add_argument("--responses", type=int, default=2000)
    rep.add_argument("--split", action="store_true")
    rep.add_argument("--session-header", default="")
    rep.add_argument("--request-id-header", default="")
    args = parser.parse_args()
    if args.command == "capture":
        capture(args.chat, args.output_tokens, args.file)
        return
    t = time.process_time()
    results = replay(
        args.file, args.responses, args.split, args.session_header, args.request_id_header
    )
    cpu = time.process_time() - t
    if results:
        r = results[-1]
        print(
            f"{args.responses} responses: {cpu / max(args.responses, 1) * 1e6:.1f} µs CPU each; "
            f"last: {r.status} {r.error_kind} chunks={len(r.chunk_times_ns)} "
            f"text={len(r.output_text)} chars usage={r.prompt_tokens}/{r.completion_tokens}"
        )


if __name__ == "__main__":
    main()
