"""One HTTP worker process: uvloop, one keep-alive HTTP client, callbacks (not tasks) per request.

Started by ``WorkerPool`` as ``python -m veeksha.dispatch.worker`` with a ``WorkerSpawn`` on its
stdin (so the API key stays in memory). It ignores SIGINT, SIGTERM and SIGHUP (the parent stops
it with ``Stop``), dies with its parent (``PR_SET_PDEATHSIG``), pins itself to its CPUs, opens its
end of the link to the main process (a Unix socket it inherited: see ``channel``) and says
``WorkerReady``. Then,
for every ``WorkItem``, it sends exactly one ``Result``, errors included; Results are flushed in
one frame per loop iteration. If the main process closes the link, the worker stops at once.

An item handed over ahead of its ready time (``not_before_ns`` set) is held on a precise timer
(``timerfd``, see ``veeksha.timers``) and released at that time; its Result carries the
release as ``released_at_ns``, and as ``received_at_ns`` (the worker takes it up then), so
``ready ≤ dispatched ≤ received ≤ sent`` holds for every request. An item that reaches the
worker after its ready time (the worker's loop was busy) is sent at once, and its arrival is
reported as its release: it is recorded as dispatched late, never as dispatched early. A
``Stop`` with a grace lets held items leave on time (they are due within the hand-over window)
and counts them as in flight; a ``Stop`` without grace withdraws them: cancelled Results, never
sent.

Timestamps (monotonic ns): ``received_at`` when the item was decoded; ``sent_at`` right before
the request is written to the socket (the first attempt's, when retrying), hence after opening a
connection when no idle kept-alive one was there: that set-up (TCP connect; on https the TLS
handshake too) is measured and reported as ``Result.connect_ns``, so that it is counted neither as
the server's latency nor as the generator's lag; one timestamp per
read of the response, shared by the SSE events of that read (every connection made readable by
one wake-up of the loop is read and stamped before any of those reads is parsed:
``Http1Pool(stamp_first=True)``); ``last_byte_at`` at the last read
that carried response bytes (head or body). ``completed_at`` is when the request ended: for an
answer, its last byte (``last_byte_at``); for a failure, the moment the worker saw it (the
timeout's timer fired, the cancellation, the reset, the end of an error body), which may be long
after the last byte (a server that stalls). Latencies measured from ``sent_at`` therefore include
any retry back-off, as a user would see.

Plain ``http`` (``Http1Pool``): a request is an ``_Exchange``, driven by callbacks from the
connection's ``data_received``; no task, coroutine, future or context variable per request, and
its timeout is a deadline on its route's one loop timer (``_Timeouts``). ``https`` (aiohttp):
one task per request (``_run_item``).

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
import zlib
from typing import TYPE_CHECKING, Any

import msgspec
import uvloop

from veeksha.clock import MonotonicClock
from veeksha.dispatch.channel import Link, encode_frame, send_packet, to_worker_decoder
from veeksha.dispatch.chunkshape import ShapeMemory
from veeksha.dispatch.http1 import ConnectFailed, Exchange, Http1Pool, MalformedResponse
from veeksha.dispatch.inprocess import dry_result
from veeksha.dispatch.kernel_stamps import hold_stamps_on
from veeksha.dispatch.messages import Result, Stop, ToWorker, WorkerReady, WorkerStats, WorkItem
from veeksha.dispatch.numbers import sendable_timings
from veeksha.dispatch.openai import (
    RequestBuilder,
    ResponseAccumulator,
    ResponseError,
    StreamOver,
)
from veeksha.dispatch.settings import WorkerSettings, WorkerSpawn
from veeksha.generate.images import data_url
from veeksha.open_files import CLIENT_LIMIT_ERRNOS, raise_open_file_limit
from veeksha.redact import READ_WINDOW, Redactors
from veeksha.terminal import STOP_SIGNALS
from veeksha.timers import Cancellable, LoopTimers

if TYPE_CHECKING:  # imported when needed: see veeksha.dispatch.aiohttp_client
    from collections.abc import Callable

    import aiohttp

__all__ = ["Worker", "main", "sendable"]

_MESSAGE_CHARS = 320  # an error_message's length: masked first (veeksha.redact), then cut
_RETRY_STATUSES = (429, 503)
_NO_ANSWER = (204, 205)  # 2xx without content (3xx are no answers either)
_BACKOFF_BASE_S = 0.25
_BACKOFF_CAP_S = 10.0
_RESULTS_LINGER_S = 5.0  # at exit, for the last Results to leave

_monotonic_ns = time.monotonic_ns

# Set per request task: [sent_at, connect_ns, on_sent]; the write task aiohttp creates inherits
# it, and its connector sets the set-up of a connection it opens for the task (see
# aiohttp_client); on_sent, when not None, is called as the request is first written.
_sent_slot: contextvars.ContextVar[list[Any]] = contextvars.ContextVar("veeksha_sent_slot")


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Route:
    """Where the requests of one client go: its settings, body builder, headers and HTTP
    client (``WorkItem.client`` indexes the worker's routes; one client: one route)."""

    __slots__ = (
        "builder",
        "headers",
        "http",
        "per_request",
        "redact",
        "send",
        "session",
        "settings",
        "shapes",
        "timeouts",
    )

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.builder = RequestBuilder(
            chat=settings.chat,
            model=settings.model,
            stream=settings.stream,
            max_tokens_param=settings.max_tokens_param,
            min_tokens_param=settings.min_tokens_param,
            ignore_eos=settings.ignore_eos,
            prompt_fallback=settings.prompt_fallback,
            extra_params=settings.extra_params,
            embeddings=settings.embeddings,
        )
        # identity: no compressed answers (a server that compresses anyway is decoded)
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
        }
        if settings.stream:
            headers["Accept"] = "text/event-stream"
        if settings.api_key:
            headers["Authorization"] = f"Bearer {settings.api_key}"
        headers.update(settings.headers)  # (validated: none of the above but User-Agent)
        self.headers = headers
        # for what servers echo back in errors: the key, and the headers' credentials
        self.redact = Redactors([settings.api_key, *settings.secrets])
        self.shapes = ShapeMemory()  # the chunk shape of this client's last stream
        self.timeouts = _Timeouts(settings.request_timeout_s)  # (plain http's requests)
        self.per_request = _PerRequestHeaders(settings)
        self.http: Http1Pool | None = None
        self.send: Callable[[bytes, _Exchange], None] = _not_open
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        settings = self.settings
        if Http1Pool.supports(settings.endpoint):
            own_agent = any(name.lower() == "user-agent" for name in self.headers)
            self.bind(
                Http1Pool(
                    settings.endpoint,
                    self.headers if own_agent else {"User-Agent": "veeksha", **self.headers},
                    settings.max_connections,
                    stamp_first=True,
                    kernel_stamps=settings.chunk_timestamps == "kernel",
                )
            )
            assert self.http is not None
            await self.http.warm(_prewarm(settings.max_connections))
        else:
            from veeksha.dispatch import aiohttp_client

            self.session = aiohttp_client.make_session(settings, _sent_slot)

    def bind(self, http: Http1Pool | None) -> None:
        """Send this client's plain-http requests on ``http``: ``send`` is the pool's own
        without headers that differ per request (nothing per request), else one that writes
        their lines after the pool's head."""
        self.http = http
        lines = self.per_request.lines
        if http is None:
            self.send = _not_open
        elif lines is None:
            self.send = http.send
        else:
            send_headed = http.send_headed

            def send(body: bytes, exchange: _Exchange) -> None:
                send_headed(body, exchange, lines(exchange.item))

            self.send = send

    async def close(self) -> None:
        self.timeouts.close()
        if self.session is not None:
            await self.session.close()
        if self.http is not None:
            self.http.close()


class _PerRequestHeaders:
    """The headers of a client whose value differs per request: ``session_header`` (the
    request's session id) and ``request_id_header`` (``request_id_prefix`` and its id).
    ``lines`` writes them for a WorkItem as header lines (None: the client has none);
    ``mapping`` gives them as a dict (the aiohttp path)."""

    __slots__ = ("lines", "prefix", "request_id", "session")

    def __init__(self, settings: WorkerSettings) -> None:
        self.session = settings.session_header
        self.request_id = settings.request_id_header
        self.prefix = settings.request_id_prefix

        def literal(text: str) -> str:  # (a % of a name or the prefix is sent as it is)
            return text.replace("%", "%%")

        session_line = f"{literal(self.session)}: %d\r\n".encode("latin-1")
        id_line = f"{literal(self.request_id)}: {literal(self.prefix)}%d\r\n".encode("latin-1")
        self.lines: Callable[[WorkItem], bytes] | None = None
        if self.session and self.request_id:
            both = session_line + id_line
            self.lines = lambda item: both % (item.session, item.request_id)
        elif self.session:
            self.lines = lambda item: session_line % item.session
        elif self.request_id:
            self.lines = lambda item: id_line % item.request_id

    def mapping(self, item: WorkItem) -> dict[str, str]:
        """The headers for ``item`` (empty: none)."""
        headers = {}
        if self.session:
            headers[self.session] = str(item.session)
        if self.request_id:
            headers[self.request_id] = f"{self.prefix}{item.request_id}"
        return headers


def _not_open(body: bytes, exchange: _Exchange) -> None:
    raise RuntimeError("the client's plain-http pool is not open")


class Worker:
    """The event-loop side of one worker process (usable in-process by tests).

    ``settings`` is client 0's; ``more`` are the other clients' (``clients:``), in order.
    """

    def __init__(
        self,
        worker_id: int,
        settings: WorkerSettings,
        channel: socket.socket,
        cpus: list[int] | None = None,
        more: list[WorkerSettings] | None = None,
        bulk: socket.socket | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.settings = settings
        self._channel = channel
        self._bulk = bulk  # the bulk link (a packet socket): deferrable requests' ok Results
        if bulk is not None:
            bulk.setblocking(False)
        self._deferred: set[int] = set()  # request ids of deferrable items not answered yet
        self._bulk_outbox: list[Result] = []
        self._cpus = cpus or []
        self._routes = [_Route(s) for s in (settings, *(more or ()))]
        self._tasks: set[asyncio.Task[None]] = set()
        self._exchanges: set[_Exchange] = set()  # http1 requests in flight
        self._drained: asyncio.Future[None] | None = None  # set when _exchanges empties
        self._outbox: list[Result] = []
        self._flush_scheduled = False
        self._stopping: asyncio.Future[float] | None = None
        self._sender: Link[ToWorker] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timers: LoopTimers | None = None
        self._held: dict[int, tuple[WorkItem, Cancellable]] = {}  # by request id
        self._released: dict[int, int] = {}  # release time of held items now in flight
        self._all_released: asyncio.Future[None] | None = None  # set when _held empties

    @property
    def _http(self) -> Http1Pool | None:
        """Client 0's plain-http pool (None: https, or not open yet)."""
        return self._routes[0].http

    @_http.setter
    def _http(self, pool: Http1Pool | None) -> None:  # (benchmarks/worker_replay.py)
        self._routes[0].bind(pool)

    @property
    def _session(self) -> aiohttp.ClientSession | None:
        """Client 0's aiohttp session (https)."""
        return self._routes[0].session

    @_session.setter
    def _session(self, session: aiohttp.ClientSession | None) -> None:
        self._routes[0].session = session

    @property
    def _builder(self) -> RequestBuilder:
        return self._routes[0].builder

    @property
    def _headers(self) -> dict[str, str]:
        return self._routes[0].headers

    # ------------------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Serve work items until ``Stop``; then finish or cancel what is in flight and return."""
        loop = self._loop = asyncio.get_running_loop()
        self._stopping = loop.create_future()
        self._timers = LoopTimers(loop, MonotonicClock(), lead=True)  # releases: on time
        link = self._sender = Link(
            self._channel, to_worker_decoder(), self._on_batch, self._on_link_closed
        )
        stamps_held: list[socket.socket] = []  # (the kernel's receive stamps on, before t0)
        if not self.settings.dry_run:
            if any(route.settings.chunk_timestamps == "kernel" for route in self._routes):
                stamps_held, _ = hold_stamps_on()
            for route in self._routes:
                await route.open()
        try:
            link.send([WorkerReady(self.worker_id, os.getpid(), self._cpus)])
            link.start(loop)
            grace_s = await self._stopping
            await self._finish(grace_s)  # still receiving: a second Stop(0) cuts the grace short
        finally:
            self._cancel_held()
            self._timers.close()  # (pending release timers: cancelled just above)
            for route in self._routes:
                await route.close()
            for sock in stamps_held:
                sock.close()
            self._flush()
            lead = self._timers.lead
            if lead is not None:  # what its wake-ups were (summary.json run.release_wake_ups)
                w = lead.wake_ups
                stats = WorkerStats(
                    self.worker_id, w.count, w.late, w.max_ns, w.lead_max_ns, w.histogram
                )
                link.send([stats])
            link.flush_blocking(_RESULTS_LINGER_S)  # the last Results leave before we exit
            link.close()
            if self._bulk is not None:
                self._bulk.close()

    def _on_link_closed(self) -> None:
        """The main process closed its end (or died): nobody will read Results; stop now."""
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(0.0)

    def _on_batch(self, batch: list[ToWorker]) -> None:
        received_at = time.monotonic_ns()
        for msg in batch:
            if type(msg) is WorkItem:
                if msg.deferrable and self._bulk is not None:
                    self._deferred.add(msg.request_id)
                if self._stopping is not None and self._stopping.done():
                    self._emit(_cancelled(msg, self.worker_id, received_at))
                elif msg.not_before_ns > received_at:
                    self._hold(msg)
                else:
                    if msg.not_before_ns:
                        # handed over ahead but it reached us after its time (this loop was
                        # busy): it leaves now, and now is its dispatch, late by what it waited
                        self._released[msg.request_id] = received_at
                    self._start(msg, received_at)
            elif isinstance(msg, Stop) and self._stopping is not None:
                if msg.grace_s <= 0:  # no grace: what is held is withdrawn, never sent
                    self._cancel_held()
                if not self._stopping.done():
                    self._stopping.set_result(msg.grace_s)
                elif msg.grace_s <= 0:  # a second, immediate Stop (Ctrl-C twice): cancel now
                    self._cancel_all()

    def _start(self, item: WorkItem, received_at: int) -> None:
        """Send ``item``; exactly one Result follows (``_emit``), whatever happens."""
        if self.settings.dry_run:
            self._emit(dry_result(item, self.worker_id, time.monotonic_ns()))
            return
        try:
            route = self._routes[item.client]
        except IndexError:
            self._emit(_unroutable(item, self.worker_id, time.monotonic_ns()))
            return
        if route.http is not None:
            self._start_http1(route, item, received_at)
            return
        assert self._loop is not None  # aiohttp (https): a task per request
        task = self._loop.create_task(self._run_item(item, received_at, route))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _hold(self, item: WorkItem) -> None:
        assert self._timers is not None
        request_id = item.request_id
        timer = self._timers.call_at_ns(item.not_before_ns, lambda: self._release(request_id))
        self._held[request_id] = (item, timer)
        if item.images:  # made while it waits, not as it leaves (a bad one: at its send)
            with contextlib.suppress(ValueError):
                for _, width, height, seed in item.images:
                    data_url(width, height, seed)

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
        if grace_s > 0:
            pending: set[asyncio.Future[None]] = set(self._tasks)
            if self._exchanges:
                self._drained = loop.create_future()
                pending.add(self._drained)
            if pending:
                await asyncio.wait(pending, timeout=grace_s)
        self._cancel_all()
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    def _cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for exchange in list(self._exchanges):
            exchange.cancel()

    # ------------------------------------------------------------------------------ results

    def _emit(self, result: Result) -> None:
        if self._released:
            released = self._released.pop(result.request_id, 0)
            if released:
                result.released_at_ns = released
        deferred = self._deferred
        if deferred and result.request_id in deferred:
            deferred.discard(result.request_id)
            if result.status == "ok":  # nobody waits for it: the bulk link (WorkItem.deferrable)
                self._bulk_outbox.append(result)
            else:
                self._outbox.append(result)
        else:
            self._outbox.append(result)
        if not self._flush_scheduled and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._bulk_outbox:
            bulk, self._bulk_outbox = self._bulk_outbox, []
            sent = False
            if self._bulk is not None:
                try:
                    sent = send_packet(self._bulk, bulk)
                except Exception:  # noqa: BLE001 - a value it cannot encode: the normal link's repair
                    sent = False
            if not sent:  # full (or unencodable): the normal link takes them, never blocks
                self._outbox.extend(bulk)
        if self._outbox and self._sender is not None:
            batch, self._outbox = self._outbox, []
            try:
                self._sender.send(batch)
            except Exception:  # noqa: BLE001 - a value the link cannot encode: see sendable
                self._sender.send(sendable(batch))

    # ------------------------------------------------------------------------------ requests

    def _start_http1(self, route: _Route, item: WorkItem, received_at: int) -> None:
        http = route.http
        assert http is not None
        exchange = _Exchange(self, http, item, received_at, route)
        try:
            body = route.builder.body(item.messages, item.max_tokens, item.images)
        except Exception as exc:  # noqa: BLE001 - every failure becomes this item's Result
            exchange.finish("error", "client_error", _msg(exc))
            return
        exchange.started_at = _monotonic_ns()
        assert self._loop is not None
        route.timeouts.start(exchange, self._loop)
        self._exchanges.add(exchange)
        route.send(body, exchange)

    async def _run_item(
        self, item: WorkItem, received_at: int, route: _Route | None = None
    ) -> None:
        if route is None:
            route = self._routes[0]
        settings = route.settings
        acc = ResponseAccumulator(
            settings.chat, route.shapes, settings.thinking_opened, settings.embeddings
        )
        # sent_at, the set-up of a connection opened before it, and what is called as it is
        # written (aiohttp_client): its abandonment's start, if its user abandons it
        slot: list[Any] = [0, 0, None]
        _sent_slot.set(slot)
        state = _Attempt()
        result: Result | None = None
        abandon = _Abandonment(item, slot) if item.abandon_after_ns >= 0 else None

        def make(status: str, kind: str = "", message: str = "") -> Result:
            return self._result(
                route,
                item,
                received_at,
                slot[0] or state.started_at or received_at,
                state.last_byte_at,
                acc,
                state.http_status,
                state.retries,
                status,
                kind,
                message,
            )

        try:
            async with asyncio.timeout(route.settings.request_timeout_s):
                if abandon is None:
                    await self._request(route, item, acc, state)
                else:
                    async with asyncio.timeout(None) as abandon.timeout:
                        await self._request(route, item, acc, state)
            result = make("ok")
        except asyncio.CancelledError:
            result = make("cancelled", "cancelled", "cancelled")
        except TimeoutError:
            if abandon is not None and abandon.timeout is not None and abandon.timeout.expired():
                result = make("abandoned", "abandoned", _abandoned_message(item))
            else:
                result = make("timeout", "timeout", _timeout_message(route.settings))
        except Exception as exc:  # noqa: BLE001 - every failure becomes this item's Result
            result = make("error", *_failure(exc))
        finally:
            if result is None:  # BaseException other than cancellation: still one Result
                result = make("error", "client_error", "aborted")
            if slot[1] and slot[0]:  # (a connection opened, then the request written on it)
                result.connect_ns = slot[1]
            if abandon is not None:
                abandon.close()
            self._emit(result)

    async def _request(
        self, route: _Route, item: WorkItem, acc: ResponseAccumulator, state: _Attempt
    ) -> None:
        """The aiohttp path (https)."""
        settings = route.settings
        body = route.builder.body(item.messages, item.max_tokens, item.images)
        state.started_at = time.monotonic_ns()
        session = route.session
        assert session is not None
        from veeksha.dispatch.aiohttp_client import read_stream

        headers = route.headers
        if route.per_request.lines is not None:
            headers = {**headers, **route.per_request.mapping(item)}
        while True:
            resp = await session.post(
                settings.endpoint, data=body, headers=headers, allow_redirects=False
            )
            state.last_byte_at = time.monotonic_ns()  # the head came
            try:
                state.http_status = resp.status
                if resp.status < 400 and (resp.status >= 300 or resp.status in _NO_ANSWER):
                    resp.close()
                    raise ResponseError("malformed_response", _no_answer(resp.status))
                if resp.status >= 400:
                    after = resp.headers.get("Retry-After")
                    delay = _retry_after(settings, resp.status, after, state.retries)
                    if delay is None:
                        snippet = await _read_window(resp.content)
                        text = snippet.decode("utf-8", "replace").strip()
                        raise _HttpError(resp.status, f"HTTP {resp.status}: {text}")
                elif settings.stream:
                    try:
                        await read_stream(resp.content, acc, state)
                    except StreamOver:  # bytes after [DONE]: ignored; the answer ended there
                        resp.close()  # (and the connection is not reused)
                        state.last_byte_at = acc.done_at_ns  # (the rest is not the answer)
                    return
                else:
                    data = await resp.read()
                    state.last_byte_at = time.monotonic_ns()
                    acc.on_body(data, state.last_byte_at)
                    return
            finally:
                resp.release()
            state.retries += 1
            await _sleep_until(time.monotonic_ns() + int(delay * 1e9))
            state.http_status = 0  # a new attempt: the row describes the last one (_resend)
            state.last_byte_at = 0

    def _result(
        self,
        route: _Route,
        item: WorkItem,
        received_at: int,
        sent_at: int,
        last_byte_at: int,
        acc: ResponseAccumulator,
        http_status: int,
        retries: int,
        status: str,
        error_kind: str = "",
        error_message: str = "",
    ) -> Result:
        """The Result of ``item``, built the moment it ended as ``status``.

        Its ``completed_at`` is an answer's last byte (``last_byte_at``), or for a failure now:
        the moment the worker saw it, however long after the last byte that was.
        """
        if error_message:  # a server (or proxy) may echo the key: masked before the cut
            error_message = route.redact(error_message, _MESSAGE_CHARS)
        completed_at = last_byte_at if status == "ok" and last_byte_at else _monotonic_ns()
        first = acc.first_chunk_at_ns
        if first is None and status == "ok":
            first = completed_at
        result = Result(
            item.request_id,
            self.worker_id,
            status,
            received_at,
            sent_at,
            completed_at,
            first,
            acc.chunk_times_ns.tolist(),
            "".join(acc.parts),
            http_status,
            error_kind,
            error_message,
            acc.prompt_tokens,
            acc.completion_tokens,
            acc.cached_tokens,
            retries,
            acc.server_timings,
            last_byte_at_ns=last_byte_at,
        )
        if acc.rejected is not None:
            result.server_numbers_rejected = acc.rejected.text()
        if acc.reasoning_chunks:  # (a reasoning model's answer; any other pays one test)
            result.reasoning_chunks = acc.reasoning_chunks
            result.first_answer_at_ns = acc.first_answer_at_ns or 0
        if acc.reasoning_tokens is not None:
            result.reasoning_tokens = acc.reasoning_tokens
        return result


class _Timeouts:
    """The request timeouts of one route's plain-http requests, on one loop timer.

    A request's deadline is its start plus the route's ``request_timeout``, so the requests in
    flight (a dict keeps their order) are in deadline order: one ``call_at`` for the oldest,
    and when it fires, every request past its deadline (that one first) times out and the
    timer is set for the next. A request that ends only leaves the dict: no timer handle is
    made and cancelled per request, and each times out when its own timer would have fired.
    """

    __slots__ = ("_armed", "_flight", "_handle", "_loop", "_timeout_s")

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._flight: dict[_Exchange, float] = {}  # in flight → its deadline (loop time)
        self._handle: asyncio.TimerHandle | None = None
        self._armed = 0.0  # the deadline the handle was set for
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, exchange: _Exchange, loop: asyncio.AbstractEventLoop) -> None:
        when = loop.time() + self._timeout_s
        self._flight[exchange] = when
        if self._handle is None:
            self._loop = loop
            self._armed = when
            self._handle = loop.call_at(when, self._fire)

    def done(self, exchange: _Exchange) -> None:
        self._flight.pop(exchange, None)

    def _fire(self) -> None:
        self._handle = None
        loop = self._loop
        assert loop is not None
        limit = max(loop.time(), self._armed)  # (the one it was set for is due, to the ns)
        flight = self._flight
        while flight:
            exchange = next(iter(flight))
            when = flight[exchange]
            if when > limit:
                self._armed = when
                self._handle = loop.call_at(when, self._fire)
                return
            del flight[exchange]
            exchange.on_timeout()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class _Abandonment:
    """The abandonment of one request on the aiohttp path: armed as the request is written
    (``start``, the slot's third entry), it expires ``timeout`` (the ``asyncio.timeout``
    around the request) at ``sent_at`` + ``WorkItem.abandon_after_ns``, never before."""

    __slots__ = ("_due_ns", "_handle", "_slot", "timeout")

    def __init__(self, item: WorkItem, slot: list[Any]) -> None:
        self._due_ns = item.abandon_after_ns
        self._slot = slot
        self._handle: asyncio.TimerHandle | None = None
        self.timeout: asyncio.Timeout | None = None
        slot[2] = self.start

    def start(self) -> None:
        self._due_ns += self._slot[0]
        self._check()

    def _check(self) -> None:
        early_s = (self._due_ns - time.monotonic_ns()) / 1e9
        loop = asyncio.get_running_loop()
        if early_s > 0:  # (the loop's timers may fire up to a ms early)
            self._handle = loop.call_later(early_s, self._check)
            return
        self._handle = None
        if self.timeout is not None and not self.timeout.expired():
            self.timeout.reschedule(loop.time())  # (expires at once)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class _Attempt:
    """The aiohttp path's per-request state."""

    __slots__ = ("http_status", "last_byte_at", "retries", "started_at")

    def __init__(self) -> None:
        self.started_at = 0
        self.http_status = 0
        self.retries = 0
        self.last_byte_at = 0


class _Exchange(Exchange):
    """One request on the ``Http1Pool`` path, from its WorkItem to its Result.

    ``Http1Pool`` calls ``on_sent``/``on_head``/``on_data``/``on_end`` per attempt; a 429/503
    is retried after its back-off on a loop timer; ``on_timeout`` (its deadline passed: the
    route's ``_Timeouts``) and ``cancel`` abort it. ``finish`` emits the one Result and forgets
    the request.

    Answers veeksha did not ask for are still read, decided once per response in ``on_head``:
    a ``200`` in ``application/json`` to a streamed request (a server that ignores ``stream``)
    is taken as the whole answer, as a non-streamed one; a body compressed with gzip or deflate
    despite ``Accept-Encoding: identity`` is decoded (a stream read by read, through ``feed``);
    any other ``Content-Encoding`` on a 2xx is a ``malformed_response``.
    """

    __slots__ = (
        "abandon_timer",
        "acc",
        "body",
        "connect_ns",
        "feed",
        "finished",
        "headers",
        "http",
        "http_status",
        "inflate",
        "item",
        "last_byte_at",
        "received_at",
        "retries",
        "retry_due_ns",
        "retry_timer",
        "route",
        "sent_at",
        "started_at",
        "stream",
        "worker",
    )

    def __init__(
        self,
        worker: Worker,
        http: Http1Pool,
        item: WorkItem,
        received_at: int,
        route: _Route | None = None,
    ) -> None:
        super().__init__()
        self.worker = worker
        self.route = route = worker._routes[0] if route is None else route
        self.http = http
        self.item = item
        self.received_at = received_at
        self.started_at = 0
        self.sent_at = 0
        self.connect_ns = 0
        self.last_byte_at = 0
        self.http_status = 0
        self.retries = 0
        self.finished = False
        self.stream = route.settings.stream
        settings = route.settings
        self.acc = ResponseAccumulator(
            settings.chat, route.shapes, settings.thinking_opened, settings.embeddings
        )
        self.feed = self.acc.feed
        self.inflate: zlib._Decompress | None = None  # a compressed answer's decoder
        self.headers: dict[bytes, bytes] | None = None
        self.body: list[bytes] | None = None
        self.retry_timer: asyncio.TimerHandle | None = None
        self.retry_due_ns = 0
        self.abandon_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ Http1Pool callbacks

    def on_connected(self, connect_ns: int) -> None:
        if not self.sent_at:  # (a later attempt's connection is opened after sent_at: its
            self.connect_ns = connect_ns  # set-up is inside the latencies, not before them)

    def on_sent(self, t_ns: int) -> None:
        if not self.sent_at:
            self.sent_at = t_ns
            after_ns = self.item.abandon_after_ns
            if after_ns >= 0:  # (a timer even at 0: the request is written after this call)
                assert self.worker._loop is not None
                self.abandon_timer = self.worker._loop.call_later(after_ns / 1e9, self._abandon)

    def on_resent(self) -> None:
        # (the server may have taken the first: it is counted, not hidden). Nothing of the
        # attempt is reset: the pool re-sends only when no byte of a response came, so neither
        # on_head nor on_data ran for it (an earlier 429/503's are reset by _resend).
        self.retries += 1

    def on_head(self, status: int, headers: dict[bytes, bytes]) -> None:
        self.last_byte_at = _monotonic_ns()  # (a body read, if any, comes after)
        self.http_status = status
        if status < 400:  # answered: nothing will resend it, so the prompt is not kept
            if status >= 300 or status in _NO_ANSWER:
                raise ResponseError("malformed_response", _no_answer(status))
            self.item.messages.clear()  # (through a long stream: ~0.8 KB a 128-token prompt)
            if self.stream and headers.get(b"content-type", b"").startswith(b"application/json"):
                self.stream = False  # stream: true ignored: the whole answer at once, as JSON
        if status >= 400 or not self.stream:
            self.stream = False
            self.headers = headers
            self.body = []
        encoding = headers.get(b"content-encoding")
        if encoding is not None and encoding.lower() != b"identity":
            self.inflate = _decompressor(encoding)
            if self.inflate is None and status < 400:  # (an error's snippet is kept as sent)
                name = encoding.decode("latin-1")
                raise ResponseError("malformed_response", f"answer compressed with {name}")
            if self.stream:
                self.feed = self._feed_inflated

    def on_data(self, data: bytes, t_ns: int) -> None:
        self.last_byte_at = t_ns
        if self.stream:
            self.feed(data, t_ns)
        else:
            assert self.body is not None
            self.body.append(data)

    def _feed_inflated(self, data: bytes, t_ns: int) -> None:
        """``feed`` of a compressed stream: each read decoded as far as it goes."""
        assert self.inflate is not None
        try:
            data = self.inflate.decompress(data)
        except zlib.error as exc:
            raise ResponseError("malformed_response", f"compressed stream: {exc}") from None
        if data:
            self.acc.feed(data, t_ns)

    def _body(self) -> bytes:
        """The whole (non-streamed or error) body, decoded if it was compressed."""
        assert self.body is not None
        body = b"".join(self.body)
        if self.inflate is None:
            return body
        try:
            return self.inflate.decompress(body) + self.inflate.flush()
        except zlib.error as exc:
            if self.http_status >= 400:
                return body  # (its snippet as sent)
            raise ResponseError("malformed_response", f"compressed body: {exc}") from None

    def on_end(self, exc: BaseException | None) -> None:
        try:
            if exc is None:
                self._ended()
            elif type(exc) is StreamOver:  # bytes after [DONE]: ignored (the pool closed the
                self.last_byte_at = self.acc.done_at_ns  # connection); the answer ended there
                self.finish("ok")
            else:
                self.finish("error", *_failure(exc))
        except Exception as error:  # noqa: BLE001 - every failure becomes this item's Result
            self.finish("error", *_failure(error))

    def _ended(self) -> None:
        status = self.http_status
        acc = self.acc
        if status >= 400:
            assert self.headers is not None
            assert self.body is not None
            after = self.headers.get(b"retry-after")
            delay = _retry_after(
                self.route.settings,
                status,
                after.decode("latin-1") if after else None,
                self.retries,
            )
            if delay is None:
                snippet = self._body()[:READ_WINDOW]
                text = snippet.decode("utf-8", "replace").strip()
                kind = "http_4xx" if status < 500 else "http_5xx"
                self.finish("error", kind, f"HTTP {status}: {text}")
                return
            self.retries += 1
            self.stream = self.route.settings.stream
            self.headers = self.body = self.inflate = None
            self.feed = acc.feed
            loop = self.worker._loop
            assert loop is not None
            self.retry_due_ns = time.monotonic_ns() + int(delay * 1e9)
            self.retry_timer = loop.call_later(delay, self._resend)
            return
        if self.stream:
            acc.end(self.last_byte_at)
            if not acc.done and not acc.chunk_times_ns and acc.completion_tokens is None:
                raise ResponseError("malformed_response", "stream ended without any event")
        else:
            assert self.body is not None
            acc.on_body(self._body(), self.last_byte_at)
        self.finish("ok")

    def _resend(self) -> None:
        early_s = (self.retry_due_ns - time.monotonic_ns()) / 1e9
        if early_s > 0:  # (the loop's timers may fire up to a ms early: Retry-After is a minimum)
            assert self.worker._loop is not None
            self.retry_timer = self.worker._loop.call_later(early_s, self._resend)
            return
        self.retry_timer = None
        # A new attempt: the row describes the last one, so nothing of the 429/503 is kept (a
        # retry that then times out has no status and no last byte, not the earlier answer's).
        self.http_status = 0
        self.last_byte_at = 0
        item = self.item  # the body is built again rather than held through every request
        self.route.send(self.route.builder.body(item.messages, item.max_tokens, item.images), self)

    # ------------------------------------------------------------------------ the worker's

    def _abandon(self) -> None:
        """Its user abandons it now if its time has come (``WorkItem.abandon_after_ns`` after
        ``sent_at``), else at that time: the connection is closed (what was written still goes
        out) and the Result is ``abandoned``, with whatever of the answer came before."""
        self.abandon_timer = None
        due_ns = self.sent_at + self.item.abandon_after_ns
        early_s = (due_ns - time.monotonic_ns()) / 1e9
        if early_s > 0:  # (the loop's timers may fire up to a ms early: never before its time)
            assert self.worker._loop is not None
            self.abandon_timer = self.worker._loop.call_later(early_s, self._abandon)
            return
        self.http.abort(self, replace=True)  # (the next request finds a connection ready)
        self.finish("abandoned", "abandoned", _abandoned_message(self.item))

    def on_timeout(self) -> None:
        self.http.abort(self)
        self.finish("timeout", "timeout", _timeout_message(self.route.settings))

    def cancel(self) -> None:
        self.http.abort(self)
        self.finish("cancelled", "cancelled", "cancelled")

    def finish(self, status: str, kind: str = "", message: str = "") -> None:
        """Emit this request's Result (once) and forget it."""
        if self.finished:
            return
        self.finished = True
        worker = self.worker
        exchanges = worker._exchanges
        exchanges.discard(self)
        self.route.timeouts.done(self)
        if self.retry_timer is not None:
            self.retry_timer.cancel()
            self.retry_timer = None
        if self.abandon_timer is not None:
            self.abandon_timer.cancel()
            self.abandon_timer = None
        result = worker._result(
            self.route,
            self.item,
            self.received_at,
            self.sent_at or self.started_at or self.received_at,
            self.last_byte_at,
            self.acc,
            self.http_status,
            self.retries,
            status,
            kind,
            message,
        )
        if self.stamps_clamped:
            result.chunk_stamps_clamped = self.stamps_clamped
        if self.connect_ns:
            result.connect_ns = self.connect_ns
        worker._emit(result)
        if not exchanges and worker._drained is not None and not worker._drained.done():
            worker._drained.set_result(None)


def _abandoned_message(item: WorkItem) -> str:
    return f"abandoned by its user {item.abandon_after_ns / 1e9:.3g} s after it was sent"


def _timeout_message(settings: WorkerSettings) -> str:
    return f"no complete response within {settings.request_timeout_s:g} s"


async def _sleep_until(due_ns: int) -> None:
    """Sleep until the monotonic clock reaches ``due_ns``: the loop's timers may fire up to a
    millisecond early, and a server's Retry-After is a minimum."""
    while (left_ns := due_ns - time.monotonic_ns()) > 0:  # noqa: ASYNC110 (a deadline, no event)
        await asyncio.sleep(left_ns / 1e9)


def _retry_after(
    settings: WorkerSettings, status: int, header: str | None, retries: int
) -> float | None:
    if status not in _RETRY_STATUSES or retries >= settings.max_retries:
        return None
    backoff = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**retries)
    after = _retry_after_s(header)
    return min(_BACKOFF_CAP_S, after) if after is not None else backoff


def _failure(exc: BaseException) -> tuple[str, str]:
    """(error_kind, error_message) of an exception raised while requesting."""
    if isinstance(exc, _HttpError):
        return ("http_4xx" if exc.status < 500 else "http_5xx"), str(exc)
    if isinstance(exc, ResponseError):
        return exc.kind, str(exc)
    if isinstance(exc, MalformedResponse):
        return "malformed_response", str(exc)
    if "aiohttp" in sys.modules:  # only an https worker imported it
        from veeksha.dispatch.aiohttp_client import protocol_error

        malformed = protocol_error(exc)
        if malformed is not None:
            return "malformed_response", malformed
    return _classify(exc), _msg(exc)


def _decompressor(encoding: bytes) -> zlib._Decompress | None:
    """The decoder of a ``Content-Encoding`` veeksha did not ask for: gzip or deflate; None for
    any other (br, zstd: not decoded)."""
    if encoding.lower() in (b"gzip", b"x-gzip", b"deflate"):
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # (either header: gzip or zlib)
    return None


async def _read_window(content: aiohttp.StreamReader) -> bytes:
    """The start of an error body: up to ``READ_WINDOW`` bytes (``read(n)`` may return fewer)."""
    parts: list[bytes] = []
    size = 0
    while size < READ_WINDOW and (data := await content.read(READ_WINDOW - size)):
        parts.append(data)
        size += len(data)
    return b"".join(parts)


def _no_answer(status: int) -> str:
    """Why a response with this (below 400) status is not an answer."""
    if status >= 300 and status != 304:
        return f"HTTP {status}: a redirect, not an answer (requests are not redirected)"
    return f"HTTP {status}: a response without content, where an answer was expected"


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
        # (this machine's limit, never the server's: veeksha.open_files)
        return "client_limit" if exc.errno in CLIENT_LIMIT_ERRNOS else "connection_refused"
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


def sendable(batch: list[Result]) -> list[Result]:
    """``batch`` with each Result the link cannot encode repaired, or replaced by an error.

    The frame of a batch is encoded as a whole: one Result holding a value msgpack cannot
    carry (an integer beyond 64 bits in the server's ``timings``, a lone surrogate in a text)
    failed the whole batch, and the main process then waited for its requests forever. Each
    Result is tried alone here (only after its batch failed). Its ``timings`` values that
    cannot be carried become their raw text (``numbers.sendable_timings``: the main process
    rejects them if it reads them); a Result that still fails becomes ``client_error`` for its
    request, naming the problem, with its timestamps and status code kept.
    """
    out = []
    for result in batch:
        try:
            encode_frame([result])
        except Exception as exc:  # noqa: BLE001 - whatever the value, the request gets a row
            out.append(_repaired(result, exc))
        else:
            out.append(result)
    return out


def _repaired(result: Result, exc: BaseException) -> Result:
    if result.server_timings:
        repaired = msgspec.structs.replace(
            result, server_timings=sendable_timings(result.server_timings)
        )
        try:
            encode_frame([repaired])
        except Exception as again:  # noqa: BLE001 - not the timings: the request gets an error
            exc = again
        else:
            return repaired
    return _unsendable(result, exc)


def _unsendable(result: Result, exc: BaseException) -> Result:
    return Result(
        request_id=result.request_id,
        worker_id=result.worker_id,
        status="error",
        received_at_ns=result.received_at_ns,
        sent_at_ns=result.sent_at_ns,
        completed_at_ns=result.completed_at_ns,
        http_status=result.http_status,
        error_kind="client_error",
        error_message=(
            f"the {result.status} result of this request could not be sent to the main process"
            f" ({_msg(exc)[:200]}); its answer is lost"
        )
        .encode("utf-8", "replace")
        .decode(),
        retries=result.retries,
        released_at_ns=result.released_at_ns,
        chunk_stamps_clamped=result.chunk_stamps_clamped,
        connect_ns=result.connect_ns,
    )


def _unroutable(item: WorkItem, worker_id: int, now: int) -> Result:
    return Result(
        request_id=item.request_id,
        worker_id=worker_id,
        status="error",
        received_at_ns=now,
        sent_at_ns=now,
        completed_at_ns=now,
        error_kind="client_error",
        error_message=f"no client {item.client} in this worker",
    )


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
    # Ctrl-C, SIGTERM and SIGHUP reach the whole process group (the terminal, `timeout`,
    # `docker stop`, `kill -- -PGID`): the main process decides what they mean and stops its
    # workers with ``Stop`` (or SIGKILL); a worker that died of one would lose its requests.
    # (They were blocked from before this process started: ``launch.launch_worker``.)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # (one pending is dropped)
    spawn = msgspec.msgpack.decode(sys.stdin.buffer.read(), type=WorkerSpawn)
    _die_with_parent(spawn.parent_pid)
    raise_open_file_limit()  # (a connection per request in flight: veeksha.open_files)
    try:
        if spawn.cpus:
            os.sched_setaffinity(0, spawn.cpus)
        worker = Worker(
            spawn.worker_id,
            spawn.settings,
            socket.socket(fileno=spawn.channel_fd),
            sorted(os.sched_getaffinity(0)),
            spawn.more_settings,
            socket.socket(fileno=spawn.bulk_fd) if spawn.bulk_fd >= 0 else None,
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
