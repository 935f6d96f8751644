"""One chat or completion request from arrival to its last byte, faults included.

The driver (veeksha/simulator/timing.py) says when tokens exist; ``Generation`` turns them into
bytes on the wire and records the server's timing truth:

- ``arrival_ns``: the request was fully read; ``scheduled_ns``: it got a running slot;
- ``first_token_ns`` / ``last_token_ns``: taken right before the first / last content chunk is
  written to the transport (streaming), or when the engine produced them (non-streaming);
- ``queue_wait_s`` = scheduled − arrival, ``prefill_s`` = first token − scheduled,
  ``decode_s`` = last token − first token, ``cached_tokens`` from the prefix cache.

In instant mode (fast preset) the whole response is composed in memory ("corked") and written
with one ``write``: its timestamps are taken while composing, microseconds before that write.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from veeksha.simulator.engine import SeqState, chain_hashes
from veeksha.simulator.faults import Fault
from veeksha.simulator.http import HttpConnection, chunk, response_head
from veeksha.simulator.timing import NsTimer
from veeksha.simulator.wire import INLINE_FIELDS, GenRequest, Templates, usage

if TYPE_CHECKING:
    from veeksha.simulator.server import SimServer

__all__ = ["Generation"]

_SSE_HEAD = response_head(200, b"text/event-stream", extra=b"cache-control: no-cache\r\n")
_SSE_HEAD_CLOSE = response_head(
    200, b"text/event-stream", keep_alive=False, extra=b"cache-control: no-cache\r\n"
)
_MALFORMED = b'data: {"id": "malformed", "choices": [\n\n'
_DONE = b"data: [DONE]\n\n"
_LAST_CHUNK = b"0\r\n\r\n"
_MID_STREAM = (Fault.DISCONNECT, Fault.STALL, Fault.MALFORMED_SSE)


_THINK_OPEN, _THINK_CLOSE = b"<think>", b"</think>\\n\\n"  # (JSON: a newline escaped)
INVALID_WORD = b"INVALID"  # an invalid answer's first word (faults.invalid_answer_probability)


class Generation:
    """The life of one completion request; the drivers' ``Sink``."""

    __slots__ = (
        "_cork",
        "_done",
        "_fired",
        "_hold",
        "chunk_ns",
        "chunks",
        "conn",
        "fault",
        "first_ns",
        "inline",
        "invalid",
        "last_ns",
        "offset",
        "opened",
        "req",
        "sent",
        "seq",
        "server",
        "thinking",
        "timer",
        "tpl",
    )

    def __init__(
        self,
        server: SimServer,
        conn: HttpConnection,
        req: GenRequest,
        arrival_ns: int,
        fault: Fault | None,
        tpl: Templates,
    ) -> None:
        self.server = server
        self.conn = conn
        self.req = req
        self.fault = fault
        self.tpl = tpl
        exact = req.ignore_eos or req.min_tokens >= req.max_tokens
        length, self.offset = server.text.draw(req.max_tokens, req.min_tokens, exact, req.seed)
        self.invalid = server.invalid_answer()  # (faults.invalid_answer_probability)
        cache = server.cache
        hashes = chain_hashes(req.tokens, cache.block_size) if cache is not None else []
        self.seq = SeqState(len(req.tokens), length, hashes, arrival_ns, owner=self)
        self.sent = 0  # tokens turned into chunks
        self.chunks = 0  # content chunks emitted
        self.first_ns = 0
        self.last_ns = 0
        self.chunk_ns: list[int] | None = [] if server.config.record_chunk_times else None
        # a reasoning model's tokens of thinking before its answer (chat only)
        self.thinking = server.config.reasoning_tokens if req.kind == "chat" else 0
        # (its thinking in the content, between <think> and </think>: no reasoning parser)
        # (template: the chat template opened <think> in the prompt: the content has only
        # </think>)
        self.inline = bool(self.thinking) and server.config.reasoning_field in INLINE_FIELDS
        self.opened = server.config.reasoning_field == "template"
        self.timer: NsTimer | None = None
        self._cork: list[bytes] | None = None
        self._hold: list[tuple[bytes | None, int]] | None = None
        self._fired = False
        self._done = False

    # ------------------------------------------------------------------ start and stop
    def start(self) -> None:
        """Begin: answer at once, or after slow headers, through the driver."""
        self.conn.on_lost = self.cancel
        if self.fault is Fault.SLOW_HEADERS:
            delay = self.server.config.faults.slow_headers_s
            self.timer = NsTimer(
                self.server.loop, time.monotonic_ns() + round(delay * 1e9), self._begin
            )
        else:
            self._begin()

    def _begin(self) -> None:
        self.timer = None
        instant = self.server.instant and self.fault is not Fault.STALL
        if instant:
            self._cork = []
        if self.req.stream:
            self._raw(_SSE_HEAD if self.conn.keep_alive else _SSE_HEAD_CLOSE)
            if self.server.config.role_chunk and self.req.kind == "chat":
                self._raw(chunk(self.tpl.role_chunk()))
        if self.fault is Fault.NEVER_ENDING:
            self._uncork()
            self.seq.scheduled_ns = time.monotonic_ns()
            self._never_ending()
            return
        self.server.driver.submit(self)
        if instant:
            self._uncork()

    def cancel(self) -> None:
        """The client went away: stop generating and free the slot."""
        if self._done:
            return
        self._done = True
        self.server.stats.cancelled += 1
        self.server.stats.generation_tokens += self.seq.generated
        self.server.stats.vllm.ended("abort", None, None)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.server.driver.abort(self)

    # ------------------------------------------------------------------ driver events
    def on_scheduled(self, now_ns: int) -> None:
        """The request got a running slot (``seq.scheduled_ns`` is set)."""

    def on_tokens(self, count: int, now_ns: int) -> None:
        """``count`` tokens exist in total: stream the new ones."""
        if self._done:
            return
        if not self.req.stream:
            if not self.first_ns:
                self.first_ns = now_ns
            self.last_ns = now_ns
            return
        k = self.server.config.tokens_per_chunk
        sent = self.sent
        last = count >= self.seq.target_tokens
        if count - sent < k and not last:
            return
        words = self.server.text.slice(self.offset, sent, count)
        thinking = self.thinking
        if self.inline:
            if sent == 0 and words and not self.opened:
                words[0] = _THINK_OPEN + words[0]
            if sent <= thinking - 1 < count:  # (the thinking's last word closes the block)
                words[thinking - 1 - sent] += _THINK_CLOSE
        if sent <= thinking < count:  # the answer's first word: unspaced, as the body's text
            at = thinking - sent
            if self.invalid:
                words[at] = INVALID_WORD
            elif thinking:
                words[at] = words[at].lstrip(b" ")
        prefix, suffix = self.tpl.prefix, self.tpl.suffix
        stop = len(words) if last else len(words) - len(words) % k
        if thinking > sent:
            events = self._thinking_events(words, thinking - sent, stop)
        elif k == 1:
            events = [prefix + word + suffix for word in words]
        else:
            events = [prefix + b"".join(words[i : i + k]) + suffix for i in range(0, stop, k)]
        self.sent = sent + stop
        if self._hold is None and (self._fired or self.fault not in _MID_STREAM):
            # the hot path: every SSE event of this instant in one HTTP chunk, one write
            self.chunks += len(events)
            self._emit(chunk(b"".join(events)), len(events))
            return
        for event in events:
            if self._done:
                return
            self._content(event)

    def on_done(self, now_ns: int) -> None:
        """The answer is complete: final chunks (or the body), cache insertion, stats."""
        if self._done:
            return
        if self.fault in _MID_STREAM and not self._fired:
            self._fire()  # fewer chunks than after_tokens: strike before the end
            if self._done:
                return  # (a disconnect: an abort, counted by _fire, never a finished answer)
        seq = self.seq
        server = self.server
        server.stats.generation_tokens += seq.generated
        first_ns = self.first_ns or now_ns
        ttft_ns = first_ns - seq.arrival_ns
        reason = "length" if seq.generated >= self.req.max_tokens else "stop"
        scheduled_ns = seq.scheduled_ns or seq.arrival_ns
        phases = (  # (as the answer's timings: queue_wait_s, prefill_s, decode_s)
            (scheduled_ns - seq.arrival_ns) / 1e9,
            (first_ns - scheduled_ns) / 1e9,
            ((self.last_ns or now_ns) - first_ns) / 1e9,
        )
        server.stats.vllm.ended(reason, ttft_ns / 1e9, (now_ns - seq.arrival_ns) / 1e9, phases)
        if server.stats.vllm.spec is not None:
            server.stats.vllm.spec.answered(seq.generated)
        cache = server.cache
        if cache is not None:
            tokens = self.req.tokens + server.text.tokens(self.offset, seq.generated)
            start = len(seq.prompt_hashes)
            prev = seq.prompt_hashes[-1] if start else 0
            cache.insert(chain_hashes(tokens, cache.block_size, start, prev), now_ns)
        if self.req.stream:
            self._emit(None, 0)
        else:
            if not self.first_ns:
                self.first_ns = self.last_ns = now_ns
            self._emit(None, 0)

    # ------------------------------------------------------------------ output path
    def _thinking_events(self, words: list[bytes], split: int, stop: int) -> list[bytes]:
        """The events of ``words[:stop]`` when the first ``split`` of them are thinking: each
        part in chunks of ``tokens_per_chunk`` of its own."""
        k = self.server.config.tokens_per_chunk
        tpl = self.tpl
        split = min(split, stop)
        events = []
        for lo, hi, head in ((0, split, tpl.thinking), (split, stop, tpl.prefix)):
            events += [
                head + b"".join(words[i : min(i + k, hi)]) + tpl.suffix for i in range(lo, hi, k)
            ]
        return events

    def _content(self, data: bytes) -> None:
        if (
            self.fault in _MID_STREAM
            and not self._fired
            and self.chunks >= self.server.config.faults.after_tokens
        ):
            self._fire()
            if self._done:
                return
        self.chunks += 1
        self._emit(chunk(data), 1)

    def _fire(self) -> None:
        self._fired = True
        fault = self.fault
        if fault is Fault.DISCONNECT:
            if not self.req.stream:
                # a body has no events: the head and the body's first half, then the break (a
                # close before any byte is a stale keep-alive connection to a client, which
                # sends the request again: the fault would go unseen)
                whole = self._final()
                body = whole.index(b"\r\n\r\n") + 4
                self._raw(whole[: body + (len(whole) - body) // 2])
            self._uncork()
            self._done = True
            self.server.stats.generation_tokens += self.seq.generated
            self.server.stats.vllm.ended("abort", None, None)  # (vLLM: a request it aborted)
            self.server.driver.abort(self)
            self.conn.on_lost = None
            self.conn.close()
        elif fault is Fault.MALFORMED_SSE:
            self._raw(chunk(_MALFORMED) if self.req.stream else b"")
        elif fault is Fault.STALL:
            self._uncork()
            self._hold = []
            delay = self.server.config.faults.stall_s
            NsTimer(self.server.loop, time.monotonic_ns() + round(delay * 1e9), self._release)

    def _raw(self, data: bytes) -> None:
        if not data:
            return
        if self._hold is not None:
            self._hold.append((data, 0))
        elif self._cork is not None:
            self._cork.append(data)
        else:
            self.conn.write(data)

    def _emit(self, data: bytes | None, content: int) -> None:
        """``content`` content chunks in ``data``, or (data None) the end of the response.

        Held during a stall; the timestamps are taken right before the write to the transport.
        """
        if self._hold is not None:
            self._hold.append((data, content))
            return
        now = time.monotonic_ns()
        if content:
            if not self.first_ns:
                self.first_ns = now
            self.last_ns = now
            if self.chunk_ns is not None:
                self.chunk_ns.extend([now] * content)
        if data is None:
            data = self._final()
            self._done = True
        if self._cork is not None:
            self._cork.append(data)
        else:
            self.conn.write(data)
        if self._done:
            self._uncork()
            self.conn.finish()

    def _release(self) -> None:
        held, self._hold = self._hold, None
        if self._done or held is None:
            return
        self._cork = []
        for data, content in held:
            if data is None or content:
                self._emit(data, content)
            else:
                self._raw(data)
        self._uncork()

    def _uncork(self) -> None:
        cork, self._cork = self._cork, None
        if cork:
            self.conn.write(b"".join(cork))

    # ------------------------------------------------------------------ final bytes
    def timings(self) -> dict[str, Any]:
        """The server's timing truth of this request."""
        seq = self.seq
        out: dict[str, Any] = {
            "arrival_ns": seq.arrival_ns,
            "scheduled_ns": seq.scheduled_ns,
            "first_token_ns": self.first_ns,
            "last_token_ns": self.last_ns,
            "queue_wait_s": (seq.scheduled_ns - seq.arrival_ns) / 1e9,
            "prefill_s": (self.first_ns - seq.scheduled_ns) / 1e9,
            "decode_s": (self.last_ns - self.first_ns) / 1e9,
            "cached_tokens": seq.cached_tokens,
            "prompt_tokens": seq.prompt_tokens,
            "completion_tokens": seq.generated,
            "process": self.server.process_index,
            "fault": self.fault.value if self.fault is not None else None,
        }
        if self.chunk_ns is not None:
            out["chunk_ns"] = self.chunk_ns
        return out

    def _final(self) -> bytes:
        seq = self.seq
        req = self.req
        server = self.server
        finish = "length" if seq.generated >= req.max_tokens else "stop"
        thinking = min(self.thinking, seq.generated)
        counted = thinking if self.thinking and not self.inline else -1  # (a parser's count)
        use = usage(seq.prompt_tokens, seq.generated, seq.cached_tokens, counted)
        timings = self.timings()
        if not req.stream:
            if self.fault is Fault.MALFORMED_SSE:
                body = b'{"id": "malformed", "choices": ['
            else:
                text = server.text.text_range(self.offset, thinking, seq.generated)
                if self.invalid and text:
                    text = " ".join([INVALID_WORD.decode(), *text.split(" ")[1:]])
                thought = server.text.text(self.offset, thinking) if self.thinking else None
                body = self.tpl.body(text, finish, use, timings, thought)
            head = response_head(
                200, b"application/json", length=len(body), keep_alive=self.conn.keep_alive
            )
            return head + body
        encode = server.encode
        if req.include_usage:
            tail = self.tpl.finish_chunk(finish.encode(), None) + self.tpl.usage_chunk(
                encode(use), encode(timings)
            )
        else:
            tail = self.tpl.finish_chunk(finish.encode(), encode(timings))
        return chunk(tail + _DONE) + _LAST_CHUNK

    # ------------------------------------------------------------------ never-ending fault
    def _never_ending(self) -> None:
        if self._done:
            return
        self.timer = None
        if self.req.stream:
            seq = self.seq
            word = self.server.text.slice(self.offset, seq.generated, seq.generated + 1)[0]
            seq.generated += 1
            self._content(self.tpl.prefix + word + self.tpl.suffix)
        interval = self.server.config.faults.never_ending_interval_s
        self.timer = NsTimer(
            self.server.loop, time.monotonic_ns() + round(interval * 1e9), self._never_ending
        )
