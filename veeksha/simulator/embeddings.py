"""``POST /v1/embeddings`` as vLLM serves an embedding (pooling) model: request, vectors, life.

The request is OpenAI's body as vLLM takes it: ``input`` (a string, a list of strings, a list of
token ids, or a list of lists of token ids), ``model`` (optional), ``encoding_format``
(``float`` or ``base64``), ``dimensions`` (optional); other keys are ignored. A text is counted
with the server's tokenizer as a completions prompt is (no chat template); token ids as they
are.

Each input is one prefill-only sequence of the served model's engine (``SeqState`` with
``target_tokens`` 0): it waits for a slot like a generation, prefills (``prefill_tokens_per_s``
with engine timing, ``ttft_ms`` with fixed timing) and is done, without a decode step and without
the prefix cache. The answer goes out when the request's last input is done.

Vectors: the input's token ids and the model's name, hashed with BLAKE2b, seed a stream of
bytes (SHAKE-256) read as signed 32-bit integers; the first ``dimensions`` of them, scaled to
unit length, are the vector in float32 (so a smaller ``dimensions`` is the larger vector's head
renormalised, as Matryoshka models answer). ``base64`` is the vector's little-endian float32
bytes, as vLLM and OpenAI send it.

>>> vector = embedding_vector([1, 2, 3], 4, "m")
>>> len(vector), round(sum(x * x for x in struct.unpack("<4f", vector)), 5)
(16, 1.0)
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from veeksha.simulator.engine import SeqState
from veeksha.simulator.faults import Fault
from veeksha.simulator.http import HttpConnection, response_head
from veeksha.simulator.timing import NsTimer
from veeksha.simulator.wire import ApiError, Tokenize, json_object

if TYPE_CHECKING:
    from veeksha.simulator.server import SimServer

__all__ = [
    "EMBEDDING_FAULTS",
    "Embedding",
    "EmbeddingRequest",
    "embedding_vector",
    "parse_embeddings",
]

#: The faults an embedding request can get: the HTTP errors and slow headers. The others strike
#: a stream's events (an embedding is one JSON body) and are served as no fault.
EMBEDDING_FAULTS = frozenset((Fault.HTTP_500, Fault.HTTP_503, Fault.HTTP_429, Fault.SLOW_HEADERS))
ENCODING_FORMATS = ("float", "base64")

_encode = msgspec.json.Encoder().encode
_INPUT_SHAPES = "a string, a list of strings, a list of token ids, or a list of lists of token ids"


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    """A validated embedding request: each input's token ids, the vector size, the encoding."""

    inputs: list[list[Any]]
    dimensions: int
    as_base64: bool

    @property
    def prompt_tokens(self) -> int:
        """The usage's prompt tokens: every input's."""
        return sum(len(tokens) for tokens in self.inputs)


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _inputs(value: Any, tokenize: Tokenize) -> list[list[Any]]:
    """Each input's tokens: a text's from ``tokenize``, token ids as given."""
    if isinstance(value, str):
        return [tokenize(value)]
    if not isinstance(value, list) or not value:
        raise ApiError(400, f"'input' must be {_INPUT_SHAPES}, not empty", param="input")
    if all(isinstance(item, str) for item in value):
        return [tokenize(item) for item in value]
    if all(_is_id(item) for item in value):
        return [list(value)]
    if all(isinstance(item, list) and all(_is_id(i) for i in item) for item in value):
        return [list(item) for item in value]
    raise ApiError(400, f"'input' must be {_INPUT_SHAPES}", param="input")


def parse_embeddings(
    raw: bytes, model: str, max_model_len: int, embedding_dims: int, tokenize: Tokenize
) -> EmbeddingRequest:
    """Validate the body of ``/v1/embeddings`` for the served ``model`` (a body naming another
    is a 404; one without ``model`` is for this one)."""
    body = json_object(raw)
    name = body.get("model")
    if name is not None and not isinstance(name, str):
        raise ApiError(400, "'model' must be a string", param="model")
    if name is not None and name != model:
        raise ApiError(
            404,
            f"The model '{name}' does not exist; this server serves '{model}'.",
            param="model",
            code="model_not_found",
        )
    if "input" not in body:
        raise ApiError(400, "'input' is required", param="input")
    encoding = body.get("encoding_format", "float")
    if encoding not in ENCODING_FORMATS:
        raise ApiError(
            400, "'encoding_format' must be 'float' or 'base64'", param="encoding_format"
        )
    dimensions = body.get("dimensions")
    if dimensions is None:
        dimensions = embedding_dims
    elif not _is_id(dimensions) or dimensions < 1:
        raise ApiError(400, "'dimensions' must be an integer >= 1", param="dimensions")
    elif dimensions > embedding_dims:
        raise ApiError(
            400,
            f"'dimensions' is {dimensions}; this model's embeddings have {embedding_dims}",
            param="dimensions",
        )
    inputs = _inputs(body["input"], tokenize)
    for i, tokens in enumerate(inputs):
        if not tokens:
            raise ApiError(400, f"input {i} has no tokens", param="input")
        if len(tokens) > max_model_len:
            raise ApiError(
                400,
                f"This model's maximum context length is {max_model_len} tokens. However, you "
                f"requested {len(tokens)} tokens in the input for embedding generation. Please "
                "reduce the length of the input.",
                param="input",
                code="context_length_exceeded",
            )
    return EmbeddingRequest(inputs, dimensions, encoding == "base64")


def embedding_vector(tokens: Sequence[Any], dimensions: int, model: str) -> bytes:
    """The unit vector of ``tokens`` for ``model``: ``dimensions`` little-endian float32s."""
    digest = hashlib.blake2b(_encode([model, tokens]), digest_size=32).digest()
    stream = hashlib.shake_256(digest).digest(4 * dimensions)
    values = struct.unpack(f"<{dimensions}i", stream)
    norm = math.hypot(*values) or 1.0
    return struct.pack(f"<{dimensions}f", *(value / norm for value in values))


class _Input:
    """One input of an embedding request inside the engine (the drivers' ``Sink``)."""

    __slots__ = ("request", "seq", "timer")

    def __init__(self, request: Embedding, tokens: int, arrival_ns: int) -> None:
        self.request = request
        self.seq = SeqState(tokens, 0, [], arrival_ns, owner=self, uses_prefix_cache=False)
        self.timer: NsTimer | None = None

    def on_scheduled(self, now_ns: int) -> None:
        """It got a slot (``seq.scheduled_ns``)."""

    def on_tokens(self, count: int, now_ns: int) -> None:
        """Never called: a prefill-only sequence emits no token."""

    def on_done(self, now_ns: int) -> None:
        """Its prefill is done."""
        self.request.input_done(now_ns)


class Embedding:
    """The life of one embedding request, from arrival to its one JSON answer (or abort)."""

    __slots__ = (
        "_done",
        "_pending",
        "arrival_ns",
        "conn",
        "fault",
        "req",
        "rid",
        "server",
        "sinks",
        "timer",
    )

    def __init__(
        self,
        server: SimServer,
        conn: HttpConnection,
        req: EmbeddingRequest,
        arrival_ns: int,
        fault: Fault | None,
        rid: str,
    ) -> None:
        self.server = server
        self.conn = conn
        self.req = req
        self.arrival_ns = arrival_ns
        self.fault = fault
        self.rid = rid
        self.sinks = [_Input(self, len(tokens), arrival_ns) for tokens in req.inputs]
        self.timer: NsTimer | None = None
        self._pending = len(self.sinks)
        self._done = False

    def start(self) -> None:
        """Submit the inputs to the engine, at once or after slow headers."""
        self.conn.on_lost = self.cancel
        if self.fault is Fault.SLOW_HEADERS:
            delay = round(self.server.config.faults.slow_headers_s * 1e9)
            self.timer = NsTimer(self.server.loop, time.monotonic_ns() + delay, self._submit)
        else:
            self._submit()

    def _submit(self) -> None:
        self.timer = None
        driver = self.server.driver
        for sink in self.sinks:
            driver.submit(sink)  # (instant timing: done at once, the last one answers)

    def cancel(self) -> None:
        """The client went away: an abort; every input leaves its slot or the queue."""
        if self._done:
            return
        self._done = True
        stats = self.server.stats
        stats.cancelled += 1
        stats.vllm.ended("abort", None, None)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for sink in reversed(self.sinks):  # (the queued first: no slot freed goes to them)
            self.server.driver.abort(sink)

    def input_done(self, now_ns: int) -> None:
        """One input's prefill is done; the last one's sends the answer."""
        self._pending -= 1
        if self._done or self._pending:
            return
        self._done = True
        self.server.stats.vllm.ended("stop", None, (now_ns - self.arrival_ns) / 1e9)
        body = self._body(now_ns)
        conn = self.conn
        head = response_head(200, b"application/json", length=len(body), keep_alive=conn.keep_alive)
        conn.write(head + body)
        conn.finish()

    def _body(self, now_ns: int) -> bytes:
        req = self.req
        model = self.server.config.model
        data = []
        for index, tokens in enumerate(req.inputs):
            vector = embedding_vector(tokens, req.dimensions, model)
            if req.as_base64:
                value: Any = base64.b64encode(vector).decode("ascii")
            else:
                value = list(struct.unpack(f"<{req.dimensions}f", vector))
            data.append({"object": "embedding", "index": index, "embedding": value})
        scheduled_ns = min(sink.seq.scheduled_ns for sink in self.sinks)
        prompt_tokens = req.prompt_tokens
        timings = {
            "arrival_ns": self.arrival_ns,
            "scheduled_ns": scheduled_ns,
            "finished_ns": now_ns,
            "queue_wait_s": (scheduled_ns - self.arrival_ns) / 1e9,
            "prefill_s": (now_ns - scheduled_ns) / 1e9,
            "prompt_tokens": prompt_tokens,
            "process": self.server.process_index,
            "fault": None if self.fault is None else self.fault.value,
        }
        return _encode(
            {
                "id": self.rid,
                "object": "list",
                "created": int(time.time()),
                "model": model,
                "data": data,
                "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
                "timings": timings,
            }
        )
