"""One HTTP worker process: uvloop, one keep-alive HTTP client, one task per request.

Started by ``WorkerPool`` as ``python -m veeksha.dispatch.worker`` with a ``WorkerSpawn`` on its
stdin (so the API key stays in memory). It ignores SIGINT (the parent stops it with ``Stop``),
dies with its parent (``PR_SET_PDEATHSIG``), pins itself to its CPUs, opens its end of the link
to the main process (a Unix socket it inherited: see ``channel``) and says ``WorkerReady``. Then,
for every ``WorkItem``, it sends exactly one ``Result``, errors included; Results are flushed in
one frame per loop iteration. If the main process closes the link, the worker stops at once.

An item handed over ahead of its ready time (``not_before_ns`` set) is held on a precise timer
(``timerfd``, see ``veeksha.engine.timers``) and released at that time; its Result carries the
release as ``released_at_ns``, and as ``received_at_ns`` (the worker takes it up then), so
``ready ≤ dispatched ≤ received ≤ sent`` holds for every request. A ``Stop`` with a grace lets
held items leave on time (they are due within the hand-over window) and counts them as in
flight; a ``Stop`` without grace withdraws them: cancelled Results, never sent.

Timestamps (monotonic ns): ``received_at`` when the item was decoded; ``sent_at`` when aiohttp
starts writing the request to the socket (the first attempt's, when retrying); one timestamp per
read of the response, shared by the SSE events of that read; ``completed_at`` at the last byte.
Latencies measured from ``sent_at`` therefore include any retry back-off, as a user would see.

Nothing is written to stdout/stderr per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import email.utils
import gc
import os
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING

import msgspec
import uvloop

from veeksha.clock import MonotonicClock
from veeksha.dispatch.channel import Link, encode_frame, to_worker_decoder
from veeksha.dispatch.http1 import ConnectFailed, Http1Pool
from veeksha.dispatch.inprocess import dry_result
from veeksha.dispatch.messages import Result, Stop, ToWorker, WorkerReady, WorkItem
from veeksha.dispatch.openai import RequestBuilder, ResponseAccumulator, ResponseError, SSEParser
from veeksha.dispatch.settings import WorkerSettings, WorkerSpawn
from veeksha.engine.timers import Cancellable, LoopTimers

if TYPE_CHECKING:  # imported when needed: see veeksha.dispatch.aiohttp_client
    import aiohttp

__all__ = ["Worker", "main"]

_SNIPPET_BYTES = 300
_RETRY_STATUSES = (429, 503)
_BACKOFF_BASE_S = 0.25
_BACKOFF_CAP_S = 10.0
_RESULTS_LINGER_S = 5.0  # at exit, for the last Results to leave

# Set per request task; the write task aiohttp creates inherits it (see aiohttp_client).
_sent_slot: contextvars.ContextVar[list[int]] = contextvars.ContextVar("veeksha_sent_slot")


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Worker:
    """The event-loop side of one worker process (usable in-process by tests)."""

    def __init__(
        self,
        worker_id: int,
        settings: WorkerSettings,
        channel: socket.socket,
        cpus: list[int] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.settings = settings
        self._channel = channel
        self._cpus = cpus or []
        self._builder = RequestBuilder(
            chat=settings.chat,
            model=settings.model,
            stream=settings.stream,
            max_tokens_param=settings.max_tokens_param,
            min_tokens_param=settings.min_tokens_param,
            ignore_eos=settings.ignore_eos,
            prompt_fallback=settings.prompt_fallback,
            extra_params=settings.extra_params,
        )
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if settings.stream:
            headers["Accept"] = "text/event-stream"
        if settings.api_key:
            headers["Authorization"] = f"Bearer {settings.api_key}"
        self._headers = headers
        self._tasks: set[asyncio.Task[None]] = set()
        self._outbox: list[Result] = []
        self._flush_scheduled = False
        self._stopping: asyncio.Future[float] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._http: Http1Pool | None = None
        self._sender: Link[ToWorker] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timers: LoopTimers | None = None
        self._held: dict[int, tuple[WorkItem, Cancellable]] = {}  # by request id
        self._released: dict[int, int] = {}  # release time of held items now in flight
        self._all_released: asyncio.Future[None] | None = None  # set when _held empties

    # ------------------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Serve work items until ``Stop``; then finish or cancel what is in flight and return."""
        loop = self._loop = asyncio.get_running_loop()
        self._stopping = loop.create_future()
        self._timers = LoopTimers(loop, MonotonicClock())
        link = self._sender = Link(
            self._channel, to_worker_decoder(), self._on_batch, self._on_link_closed
        )
        if not self.settings.dry_run:
            if Http1Pool.supports(self.settings.endpoint):
                self._http = Http1Pool(
                    self.settings.endpoint,
                    {"User-Agent": "veeksha", **self._headers},
                    self.settings.max_connections,
                )
                await self._http.warm(_prewarm(self.settings.max_connections))
            else:
                from veeksha.dispatch import aiohttp_client

                self._session = aiohttp_client.make_session(self.settings, _sent_slot)
        try:
            link.send([WorkerReady(self.worker_id, os.getpid(), self._cpus)])
            link.start(loop)
            grace_s = await self._stopping
            await self._finish(grace_s)  # still receiving: a second Stop(0) cuts the grace short
        finally:
            self._cancel_held()
            self._timers.close()  # (pending release timers: cancelled just above)
            if self._session is not None:
                await self._session.close()
            if self._http is not None:
                self._http.close()
            self._flush()
            link.flush_blocking(_RESULTS_LINGER_S)  # the last Results leave before we exit
            link.close()

    def _on_link_closed(self) -> None:
        """The main process closed its end (or died): nobody will read Results; stop now."""
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(0.0)

    def _on_batch(self, batch: list[ToWorker]) -> None:
        received_at = time.monotonic_ns()
        for msg in batch:
            if type(msg) is WorkItem:
                if self._stopping is not None and self._stopping.done():
                    self._emit(_cancelled(msg, self.worker_id, received_at))
                elif msg.not_before_ns > received_at:
                    self._hold(msg)
                else:
                    self._start(msg, received_at)
            elif isinstance(msg, Stop) and self._stopping is not None:
                if msg.grace_s <= 0:  # no grace: what is held is withdrawn, never sent
                    self._cancel_held()
                if not self._stopping.done():
                    self._stopping.set_result(msg.grace_s)
                elif msg.grace_s <= 0:  # a second, immediate Stop (Ctrl-C twice): cancel now
                    for task in list(self._tasks):
                        task.cancel()

    def _start(self, item: WorkItem, received_at: int) -> None:
        if self.settings.dry_run:
            self._emit(dry_result(item, self.worker_id, time.monotonic_ns()))
            return
        assert self._loop is not None
        task = self._loop.create_task(self._run_item(item, received_at))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _hold(self, item: WorkItem) -> None:
        assert self._timers is not None
        request_id = item.request_id
        timer = self._timers.call_at_ns(item.not_before_ns, lambda: self._release(request_id))
        self._held[request_id] = (item, timer)

    def _release(self, request_id: int) -> None:
        held = self._held.pop(request_id, None)
        if held is None:
            return
        released = self._released[request_id] = time.monotonic_ns()
        self._start(held[0], released)  # taken up now: received_at is the release
        if not self._held and self._all_released is not None and not self._all_released.done():
            self._all_released.set_result(None)

    def _cancel_held(self) -> None:
        """Cancel every held item (never sent): one cancelled Result each."""
        held, self._held = self._held, {}
        now = time.monotonic_ns()
        for item, timer in held.values():
            timer.cancel()
            self._emit(_cancelled(item, self.worker_id, now))

    async def _finish(self, grace_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        if self._held and grace_s > 0:
            # handed over before the stop: released on time (they are due within the window)
            self._all_released = loop.create_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_released, grace_s)
        self._cancel_held()
        grace_s = deadline - loop.time()
        if self._tasks and grace_s > 0:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    # ------------------------------------------------------------------------------ results

    def _emit(self, result: Result) -> None:
        if self._released:
            released = self._released.pop(result.request_id, 0)
            if released:
                result.released_at_ns = released
        self._outbox.append(result)
        if not self._flush_scheduled and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._outbox and self._sender is not None:
            batch, self._outbox = self._outbox, []
            self._sender.send(batch)

    # ------------------------------------------------------------------------------ requests

    async def _run_item(self, item: WorkItem, received_at: int) -> None:
        acc = ResponseAccumulator(self.settings.chat)
        slot = [0]
        _sent_slot.set(slot)
        state = _Attempt()
        result: Result | None = None
        try:
            async with asyncio.timeout(self.settings.request_timeout_s):
                await self._request(item, acc, state)
            result = self._result(item, received_at, slot, acc, state, "ok")
        except asyncio.CancelledError:
            result = self._result(item, received_at, slot, acc, state, "cancelled", "cancelled")
        except TimeoutError:
            msg = f"no complete response within {self.settings.request_timeout_s:g} s"
            result = self._result(item, received_at, slot, acc, state, "timeout", "timeout", msg)
        except _HttpError as exc:
            kind = "http_4xx" if exc.status < 500 else "http_5xx"
            result = self._result(item, received_at, slot, acc, state, "error", kind, str(exc))
        except ResponseError as exc:
            result = self._result(item, received_at, slot, acc, state, "error", exc.kind, str(exc))
        except Exception as exc:  # noqa: BLE001 - every failure becomes this item's Result
            kind = _classify(exc)
            result = self._result(item, received_at, slot, acc, state, "error", kind, _msg(exc))
        finally:
            if result is None:  # BaseException other than cancellation: still one Result
                result = self._result(
                    item, received_at, slot, acc, state, "error", "client_error", "aborted"
                )
            self._emit(result)

    async def _request(self, item: WorkItem, acc: ResponseAccumulator, state: _Attempt) -> None:
        settings = self.settings
        body = self._builder.body(item.messages, item.max_tokens)
        state.started_at = time.monotonic_ns()
        if self._http is not None:
            await self._request_http1(self._http, body, acc, state)
            return
        assert self._session is not None
        from veeksha.dispatch.aiohttp_client import read_stream

        while True:
            resp = await self._session.post(settings.endpoint, data=body, headers=self._headers)
            try:
                state.http_status = resp.status
                if resp.status >= 400:
                    delay = self._retry_after(resp.status, resp.headers.get("Retry-After"), state)
                    if delay is None:
                        snippet = await resp.content.read(_SNIPPET_BYTES)
                        text = snippet.decode("utf-8", "replace").strip()
                        raise _HttpError(resp.status, f"HTTP {resp.status}: {text}")
                elif settings.stream:
                    await read_stream(resp.content, acc, state)
                    return
                else:
                    data = await resp.read()
                    state.completed_at = time.monotonic_ns()
                    acc.on_body(data, state.completed_at)
                    return
            finally:
                resp.release()
            state.retries += 1
            await asyncio.sleep(delay)

    async def _request_http1(
        self, http: Http1Pool, body: bytes, acc: ResponseAccumulator, state: _Attempt
    ) -> None:
        slot = _sent_slot.get()
        stream = self.settings.stream

        def on_sent(t_ns: int) -> None:
            if not slot[0]:
                slot[0] = t_ns

        while True:
            exchange = _Exchange(acc, state, stream)
            await http.request(body, exchange, on_sent)
            status = exchange.status
            if status >= 400:
                after = exchange.headers.get(b"retry-after")
                delay = self._retry_after(status, after.decode("latin-1") if after else None, state)
                if delay is None:
                    snippet = b"".join(exchange.body)[:_SNIPPET_BYTES]
                    text = snippet.decode("utf-8", "replace").strip()
                    raise _HttpError(status, f"HTTP {status}: {text}")
                state.retries += 1
                await asyncio.sleep(delay)
                continue
            if stream:
                tail = exchange.parser.close()
                if tail:
                    acc.on_events(tail, state.completed_at)
                if not acc.done and not acc.parts and acc.completion_tokens is None:
                    raise ResponseError("malformed_response", "stream ended without any event")
            else:
                state.completed_at = time.monotonic_ns()
                acc.on_body(b"".join(exchange.body), state.completed_at)
            return

    def _retry_after(self, status: int, header: str | None, state: _Attempt) -> float | None:
        if status not in _RETRY_STATUSES or state.retries >= self.settings.max_retries:
            return None
        backoff = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**state.retries)
        after = _retry_after_s(header)
        return min(_BACKOFF_CAP_S, after) if after is not None else backoff

    def _result(
        self,
        item: WorkItem,
        received_at: int,
        slot: list[int],
        acc: ResponseAccumulator,
        state: _Attempt,
        status: str,
        error_kind: str = "",
        error_message: str = "",
    ) -> Result:
        now = time.monotonic_ns()
        key = self.settings.api_key
        if key and key in error_message:  # a server (or proxy) that echoes the request headers
            error_message = error_message.replace(key, "***")
        sent_at = slot[0] or state.started_at or received_at
        completed_at = state.completed_at or now
        first = acc.first_chunk_at_ns
        if status == "ok" and first is None:
            first = completed_at
        return Result(
            request_id=item.request_id,
            worker_id=self.worker_id,
            status=status,
            received_at_ns=received_at,
            sent_at_ns=sent_at,
            completed_at_ns=completed_at,
            first_chunk_at_ns=first,
            chunk_times_ns=acc.chunk_times_ns,
            output_text=acc.output_text,
            http_status=state.http_status,
            error_kind=error_kind,
            error_message=error_message,
            prompt_tokens=acc.prompt_tokens,
            completion_tokens=acc.completion_tokens,
            cached_tokens=acc.cached_tokens,
            retries=state.retries,
            server_timings=acc.server_timings,
        )


class _Attempt:
    __slots__ = ("completed_at", "http_status", "retries", "started_at")

    def __init__(self) -> None:
        self.started_at = 0
        self.http_status = 0
        self.retries = 0
        self.completed_at = 0


class _Exchange:
    """One attempt's response as ``Http1Pool`` delivers it: SSE parsed read by read."""

    __slots__ = ("acc", "body", "feed", "headers", "parser", "state", "status", "stream")

    def __init__(self, acc: ResponseAccumulator, state: _Attempt, stream: bool) -> None:
        self.acc = acc
        self.state = state
        self.stream = stream
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.body: list[bytes] = []
        self.parser = SSEParser()
        self.feed = self.parser.feed

    def on_head(self, status: int, headers: dict[bytes, bytes]) -> None:
        self.status = status
        self.state.http_status = status
        self.headers = headers
        if status >= 400 or not self.stream:
            self.stream = False

    def on_data(self, data: bytes, t_ns: int) -> None:
        if not self.stream:
            self.body.append(data)
            return
        self.state.completed_at = t_ns
        events = self.feed(data)
        if events:
            self.acc.on_events(events, t_ns)


def _prewarm(max_connections: int) -> int:
    """Connections opened at start-up, so the first requests do not pay the TCP handshake."""
    return min(max_connections, 8) if max_connections > 0 else 8


def _retry_after_s(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _classify(exc: BaseException) -> str:
    if isinstance(exc, ConnectFailed):
        return "connection_refused"
    if "aiohttp" in sys.modules:  # only an https worker imported it
        from veeksha.dispatch.aiohttp_client import error_kind

        kind = error_kind(exc)
        if kind is not None:
            return kind
    if isinstance(exc, ConnectionError):
        return "connection_reset"
    return "client_error"


def _msg(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _cancelled(item: WorkItem, worker_id: int, now: int) -> Result:
    return Result(
        request_id=item.request_id,
        worker_id=worker_id,
        status="cancelled",
        received_at_ns=now,
        sent_at_ns=now,
        completed_at_ns=now,
        error_kind="cancelled",
        error_message="worker stopping",
    )


# ---------------------------------------------------------------------------------- process main


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL us when the parent dies (Linux); no-op elsewhere."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def main() -> int:
    """Entry point of a worker process: read ``WorkerSpawn`` from stdin, serve, exit 0.

    A failure before the worker is ready is reported to the pool as ``WorkerReady(error=...)``
    (exit code 1), so the pool can say why instead of pointing at a traceback.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    spawn = msgspec.msgpack.decode(sys.stdin.buffer.read(), type=WorkerSpawn)
    _die_with_parent(spawn.parent_pid)
    try:
        if spawn.cpus:
            os.sched_setaffinity(0, spawn.cpus)
        worker = Worker(
            spawn.worker_id,
            spawn.settings,
            socket.socket(fileno=spawn.channel_fd),
            sorted(os.sched_getaffinity(0)),
        )
    except Exception as exc:  # noqa: BLE001 - reported to the pool, which raises it
        _report_start_failure(spawn, f"{type(exc).__name__}: {exc}")
        return 1
    gc.collect()
    gc.freeze()  # everything imported and built so far is never scanned again
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(worker.run())
    return 0


def _report_start_failure(spawn: WorkerSpawn, error: str) -> None:
    with contextlib.suppress(OSError), socket.socket(fileno=spawn.channel_fd) as channel:
        channel.settimeout(_RESULTS_LINGER_S)
        channel.sendall(
            encode_frame([WorkerReady(spawn.worker_id, os.getpid(), spawn.cpus, error=error)])
        )


if __name__ == "__main__":
    sys.exit(main())
