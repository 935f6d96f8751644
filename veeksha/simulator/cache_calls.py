"""The calls that empty the simulator's prefix cache, answered as one real server answers them
(the ``cache_reset_api`` setting), so that ``prefix_cache_reset`` is tested on its real path:

- ``vllm``: ``POST /reset_prefix_cache`` → 200, an empty body (vLLM in its dev mode);
- ``sglang``: ``POST`` (or ``GET``) ``/flush_cache`` → 200 ``Cache flushed.``, or 400 while a
  request runs or waits (SGLang does not flush then);
- ``llama_cpp``: ``GET /slots`` lists the slots (as many as ``max_num_seqs``, at most
  :data:`MAX_SLOTS`; :data:`DEFAULT_SLOTS` without it) and ``POST /slots/{id}?action=erase``
  erases one. The simulator's cache is not kept per slot: it is emptied once every slot has
  been erased, so a client that erases some of them leaves it as it was;
- ``none``: 404 for all of them (vLLM without its dev mode).

Every cache of the process is emptied (each served model's); the hit and query counters of
``/metrics`` go on, as a server's counters do. With ``processes`` > 1 a call reaches the one
process that accepted its connection, whose cache it empties.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from veeksha.simulator.http import response_head
from veeksha.simulator.wire import ApiError

if TYPE_CHECKING:
    from veeksha.simulator.engine import PrefixCache
    from veeksha.simulator.http import HttpConnection, Request

__all__ = ["DEFAULT_SLOTS", "MAX_SLOTS", "CacheCalls", "Handler"]

MAX_SLOTS = 64
DEFAULT_SLOTS = 4

Handler = Callable[["HttpConnection", "Request"], None]
Reply = Callable[["HttpConnection", bytes, bytes], None]


class CacheCalls:
    """The routes of ``api`` that empty ``caches()``; ``busy()``: a request runs or waits;
    ``reply(conn, body, content_type)`` answers 200."""

    def __init__(
        self,
        api: str,
        caches: Callable[[], list[PrefixCache]],
        busy: Callable[[], bool],
        reply: Reply,
        max_num_seqs: int | None,
    ) -> None:
        self.api = api
        self._caches = caches
        self._busy = busy
        self._reply = reply
        self.slots = min(max_num_seqs, MAX_SLOTS) if max_num_seqs else DEFAULT_SLOTS
        self._erased: set[int] = set()
        self.resets = 0  # (caches emptied: each call that did)

    def routes(self) -> dict[tuple[bytes, bytes], Handler]:
        """The fixed routes of the API (``/slots/{id}`` is :meth:`slot_route`)."""
        if self.api == "vllm":
            return {(b"POST", b"/reset_prefix_cache"): self._reset_prefix_cache}
        if self.api == "sglang":
            return {(b"POST", b"/flush_cache"): self._flush, (b"GET", b"/flush_cache"): self._flush}
        if self.api == "llama_cpp":
            return {(b"GET", b"/slots"): self._list_slots}
        return {}

    def slot_route(self, request: Request) -> Handler | None:
        """llama.cpp's ``POST /slots/{id}``, else None."""
        if self.api != "llama_cpp" or not request.path.startswith(b"/slots/"):
            return None
        return self._slot_action if request.method == b"POST" else None

    def _empty(self) -> None:
        for cache in self._caches():
            cache.clear()
        self.resets += 1

    def _reset_prefix_cache(self, conn: HttpConnection, request: Request) -> None:
        self._empty()
        self._reply(conn, b"", b"text/plain")

    def _flush(self, conn: HttpConnection, request: Request) -> None:
        if self._busy():  # (SGLang's refusal is plain text, not an OpenAI error)
            body = b"Cache not flushed: requests are running or waiting.\n"
            head = response_head(400, b"text/plain", length=len(body), keep_alive=conn.keep_alive)
            conn.write(head + body)
            conn.finish()
            return
        self._empty()
        self._reply(conn, b"Cache flushed.\n", b"text/plain")

    def _list_slots(self, conn: HttpConnection, request: Request) -> None:
        slots = [{"id": i, "id_task": -1, "is_processing": False} for i in range(self.slots)]
        self._reply(conn, msgspec.json.encode(slots), b"application/json")

    def _slot_action(self, conn: HttpConnection, request: Request) -> None:
        try:
            slot = int(request.path.removeprefix(b"/slots/"))
        except ValueError:
            raise ApiError(400, "Invalid slot ID") from None
        if not 0 <= slot < self.slots:
            raise ApiError(400, "Invalid slot ID")
        if b"action=erase" not in request.query.split(b"&"):
            raise ApiError(400, "Invalid action")
        self._erased.add(slot)
        if len(self._erased) == self.slots:
            self._erased.clear()
            self._empty()
        self._reply(conn, msgspec.json.encode({"id_slot": slot}), b"application/json")
