"""The simulator's HTTP application: routes, the OpenAI endpoints, tokenize, health, metrics.

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions`` (streaming or not),
``POST /v1/embeddings`` (``veeksha.simulator.embeddings``), ``GET /v1/models``,
``POST /tokenize`` and ``POST /detokenize`` (vLLM's shape, or llama.cpp's with
``tokenize_api: llama_cpp``; also under ``/v1``), ``GET /health``, ``GET /metrics``
(Prometheus text), ``GET /dcgm/metrics`` (with ``gpus``: simulated GPUs as dcgm-exporter
answers, ``veeksha.simulator.gpus``), ``POST /start_profile`` and ``POST /stop_profile``
(vLLM's and SGLang's profiler: counted, nothing traced), the call that empties the prefix
cache as ``cache_reset_api`` says (``veeksha.simulator.cache_calls``). Prompts and answers
are counted with the configured ``tokenizer`` (builtin, or the simulator's own ``subword``,
``veeksha.simulator.subword``).
Every refusal is an OpenAI-style JSON error with its 4xx status; an unexpected exception
becomes a 500, never a dead server.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.simulator.cache_calls import CacheCalls, Handler
from veeksha.simulator.embeddings import EMBEDDING_FAULTS, Embedding, parse_embeddings
from veeksha.simulator.engine import BatchEngine, EngineParams, PrefixCache
from veeksha.simulator.faults import Fault, FaultPicker
from veeksha.simulator.generation import Generation
from veeksha.simulator.gpus import BusyClock, SimulatedGpus
from veeksha.simulator.http import HttpConnection, Request, response_head
from veeksha.simulator.settings import SimSettings
from veeksha.simulator.subword import ByteTokenizer, SubwordTokenizer, subword_tokenizer
from veeksha.simulator.timing import Driver, EngineDriver, FixedDriver
from veeksha.simulator.vllm_metrics import SpecDrafts, VllmCounters, vllm_lines
from veeksha.simulator.wire import (
    ApiError,
    OutputText,
    Templates,
    Tokenize,
    chat_text,
    chat_tokens,
    error_body,
    json_object,
    parse_generation,
    special_tokens,
)

__all__ = ["SimServer", "Stats", "engine_params", "merge_families"]

_JSON = b"application/json"
_IDLE_POLL_S = 0.005  # a tokenizer call held while generations run looks again this often


class _ModelOnly(msgspec.Struct):
    model: str = ""


_decode_model = msgspec.json.Decoder(_ModelOnly).decode


def _model_named(body: bytes) -> str:
    """The ``model`` a generation request names ("" when it cannot be read: the default
    model's server then reports what is wrong)."""
    try:
        return _decode_model(body).model
    except msgspec.DecodeError:
        return ""


@dataclass(slots=True)
class Stats:
    """Counters behind /metrics."""

    requests: dict[str, int] = field(default_factory=dict)
    errors: dict[int, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    cancelled: int = 0
    tokenize_delayed: int = 0
    # the profiler (POST /start_profile, /stop_profile, as vLLM's and SGLang's): whether it
    # runs, its starts and stops, and the model requests (_MODEL_PATHS) that came while it ran
    profiling: bool = False
    profile_starts: int = 0
    profile_stops: int = 0
    profiled_requests: int = 0
    header_values: dict[str, int] = field(default_factory=dict)  # count_header's, by value
    vllm: VllmCounters = field(default_factory=VllmCounters)


def engine_params(config: SimSettings) -> EngineParams:
    """The effective engine numbers of a (preset-resolved) config."""
    return EngineParams(
        max_num_seqs=config.max_num_seqs or 1,
        prefill_tokens_per_s=config.prefill_tokens_per_s or 0.0,
        decode_step_ms=config.decode_step_ms or 0.0,
        decode_step_ms_per_seq=config.decode_step_ms_per_seq or 0.0,
    )


class SimServer:
    """One process' simulator: engine, cache, faults and the request router."""

    def __init__(
        self,
        config: SimSettings,
        loop: asyncio.AbstractEventLoop,
        *,
        process_index: int = 0,
        t0_ns: int | None = None,
        busy: BusyClock | None = None,
    ) -> None:
        """``busy``: the process' GPU busy time, given to the servers of its other models
        (None: this server's own, when ``config.gpus``)."""
        self.config = config
        self.loop = loop
        self.process_index = process_index
        self.t0_ns = time.monotonic_ns() if t0_ns is None else t0_ns
        self.stats = Stats()
        if config.spec_tokens:  # (each process its own draws, seeded)
            rng = random.Random(config.seed * 7907 + process_index)
            self.stats.vllm.spec = SpecDrafts(config.spec_tokens, config.spec_acceptance, rng)
        self.encode = msgspec.json.Encoder().encode
        self.tokenizer: BuiltinTokenizer | SubwordTokenizer | ByteTokenizer = BuiltinTokenizer()
        self._prompt_tokens: Tokenize | None = None  # None: the builtin tokenizer's words
        if config.tokenizer == "subword":
            subword = subword_tokenizer()
            self.tokenizer = subword
            self._prompt_tokens = subword.encode
            self.text = OutputText(
                config.seed, str(process_index), subword.single_words(), subword.encode
            )
        else:
            self.text = OutputText(config.seed, str(process_index))
            if config.tokenizer == "bytes":
                self.tokenizer = ByteTokenizer()
                self._prompt_tokens = self.tokenizer.encode
        # what /tokenize and /detokenize use: the usage's tokenizer, unless a fault swaps it
        self.endpoint_tokenizer: BuiltinTokenizer | SubwordTokenizer | ByteTokenizer = (
            self.tokenizer
        )
        if config.faults.tokenize_mismatch:
            builtin = config.tokenizer == "builtin"
            self.endpoint_tokenizer = subword_tokenizer() if builtin else BuiltinTokenizer()
        ttl = config.prefix_cache_ttl_s
        self.cache: PrefixCache | None = (
            PrefixCache(
                config.prefix_cache_tokens,
                config.prefix_cache_block_size,
                None if ttl is None else round(ttl * 1e9),
            )
            if config.prefix_cache_tokens
            else None
        )
        params = engine_params(config)
        self.driver: Driver
        if config.timing == "engine":
            self.driver = EngineDriver(loop, BatchEngine(params, self.cache))
        else:
            self.driver = FixedDriver(
                loop,
                params.max_num_seqs,
                self.cache,
                config.ttft_ms or 0.0,
                config.itl_ms or 0.0,
                config.tokens_per_chunk,
            )
        # (the simulated GPUs: busy while any sequence of any model of the process runs)
        self.gpus: SimulatedGpus | None = None
        if busy is None and config.gpus:
            busy = BusyClock()
            self.gpus = SimulatedGpus(
                config.gpus,
                config.gpu_idle_watts,
                config.gpu_busy_watts,
                config.seed,
                self.t0_ns,
                busy,
            )
        self.busy = busy
        self.driver.slots.busy = busy
        self.instant = config.instant
        self.faults = FaultPicker(config.faults, config.seed * 1009 + process_index, self.t0_ns)
        self._invalid_share = config.faults.invalid_answer_probability
        self._invalid_rng = random.Random(config.seed * 7919 + process_index)
        self._model_json = self.encode(config.model)
        self._rid_prefix = f"sim{process_index}x{self.t0_ns % 1_000_000:06d}x"
        self._counter = 0
        self._routes = {
            (b"POST", b"/v1/chat/completions"): self._chat,
            (b"POST", b"/v1/completions"): self._completion,
            (b"POST", b"/v1/embeddings"): self._embeddings,
            (b"GET", b"/v1/models"): self._models,
            (b"POST", b"/tokenize"): self._tokenize,
            (b"POST", b"/v1/tokenize"): self._tokenize,
            (b"POST", b"/detokenize"): self._detokenize,
            (b"POST", b"/v1/detokenize"): self._detokenize,
            (b"GET", b"/health"): self._health,
            (b"GET", b"/metrics"): self._metrics,
            (b"POST", b"/start_profile"): self._start_profile,
            (b"POST", b"/stop_profile"): self._stop_profile,
        }
        self.cache_calls = CacheCalls(
            config.cache_reset_api,
            self._caches,
            self._busy,
            self._reply,
            config.max_num_seqs,
        )
        self._routes.update(self.cache_calls.routes())
        if self.gpus is not None:  # (no GPUs: a 404 like any unknown path)
            self._routes[(b"GET", b"/dcgm/metrics")] = self._dcgm_metrics
        if config.tokenize_api == "llama_cpp" and config.chat_template:
            # llama.cpp's chat template renderer (only where there is a template to render)
            self._routes[(b"POST", b"/apply-template")] = self._apply_template
        self._paths = {path for _, path in self._routes}
        # required_headers (lower-cased name, value) and count_header, as bytes: a gateway's
        self._required = [
            (name.lower().encode(), value.encode())
            for name, value in config.required_headers.items()
        ]
        self._count = None if config.count_header is None else config.count_header.lower().encode()
        # loading_s: until then every call but /metrics is a 503 (0: loaded)
        self._loading_until = self.t0_ns + int(config.loading_s * 1e9) if config.loading_s else 0
        # More models (``config.models``): each its own server object (engine, cache, text,
        # faults) on this loop; a generation request goes to the one its body names.
        self.by_model: dict[str, SimServer] = {}
        if config.models:
            self.by_model = {config.model: self}
            for name in config.served_models()[1:]:
                self.by_model[name] = SimServer(
                    config.for_model(name),
                    loop,
                    process_index=process_index,
                    t0_ns=self.t0_ns,
                    busy=busy,
                )

    def invalid_answer(self) -> bool:
        """Whether the next answer is an invalid one (a seeded draw per answer)."""
        return self._invalid_share > 0 and self._invalid_rng.random() < self._invalid_share

    # ------------------------------------------------------------------ plumbing
    def handle(self, conn: HttpConnection, request: Request) -> None:
        """Route one request; every exception becomes an error response."""
        route: Handler | None = self._routes.get((request.method, request.path))
        if self._loading_until and request.path not in _LOADING_OPEN and self._loading(conn):
            return
        if self._required and request.path not in _OPEN_PATHS and self._refused(conn, request):
            return
        if self.stats.profiling and request.path in _MODEL_PATHS:
            self.stats.profiled_requests += 1
        if self._count is not None and request.path in _MODEL_PATHS:
            value = request.headers.get(self._count, b"").decode("latin-1")
            values = self.stats.header_values
            values[value] = values.get(value, 0) + 1
        try:
            if route is None:
                route = self.cache_calls.slot_route(request)
            if route is None:
                if request.path in self._paths:
                    raise ApiError(405, f"method {request.method.decode()} not allowed here")
                raise ApiError(404, f"no route {request.path.decode(errors='replace')}")
            route(conn, request)
        except ApiError as exc:
            self._error(conn, exc.status, exc.body())
        except Exception as exc:  # noqa: BLE001  (the server must survive anything)
            self._error(conn, 500, error_body(f"internal error: {exc!r}", "server_error"))

    def _loading(self, conn: HttpConnection) -> bool:
        """Answer 503 as llama.cpp does while it loads its model (True), until ``loading_s``
        has passed since the server started (its models' list and /metrics answer meanwhile:
        ``_LOADING_OPEN``)."""
        if time.monotonic_ns() >= self._loading_until:
            self._loading_until = 0
            return False
        body = self.encode(
            {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
        )
        self._error(conn, 503, body)
        return True

    def _caches(self) -> list[PrefixCache]:
        """The prefix cache of each model this process serves (that has one)."""
        servers = list(self.by_model.values()) or [self]
        return [server.cache for server in servers if server.cache is not None]

    def _busy(self) -> bool:
        """Whether a request of any model of this process runs or waits."""
        servers = list(self.by_model.values()) or [self]
        return any(s.driver.slots.running or s.driver.slots.waiting for s in servers)

    def _refused(self, conn: HttpConnection, request: Request) -> bool:
        """Answer 401 when a required header is missing or another value (True), as a
        gateway checking its key does; the message names the header, never the value."""
        for name, value in self._required:
            given = request.headers.get(name)
            if given != value:
                what = "missing" if given is None else "has the wrong value"
                message = f"header {name.decode()} {what} (simulator.required_headers)"
                self._error(conn, 401, error_body(message, code="invalid_api_key"))
                return True
        return False

    def bad_request(self, conn: HttpConnection, status: int, message: str) -> None:
        """The connection could not even frame a request."""
        self._error(conn, status, error_body(message))

    def _error(self, conn: HttpConnection, status: int, body: bytes, extra: bytes = b"") -> None:
        self.stats.errors[status] = self.stats.errors.get(status, 0) + 1
        head = response_head(
            status, _JSON, length=len(body), keep_alive=conn.keep_alive, extra=extra
        )
        conn.write(head + body)
        conn.finish()

    def _reply(self, conn: HttpConnection, body: bytes, content_type: bytes = _JSON) -> None:
        conn.write(
            response_head(200, content_type, length=len(body), keep_alive=conn.keep_alive) + body
        )
        conn.finish()

    def _json(self, request: Request) -> dict[str, Any]:
        return json_object(request.body)

    # ------------------------------------------------------------------ generation
    def _chat(self, conn: HttpConnection, request: Request) -> None:
        self._generate(conn, request, "chat")

    def _completion(self, conn: HttpConnection, request: Request) -> None:
        self._generate(conn, request, "completion")

    def _generate(self, conn: HttpConnection, request: Request, kind: Any) -> None:
        if self.by_model:
            served = self.by_model.get(_model_named(request.body), self)
            if served is not self:
                served._generate(conn, request, kind)
                return
        config = self.config
        stats = self.stats
        stats.requests[kind] = stats.requests.get(kind, 0) + 1
        if self._prompt_tokens is None:
            req = parse_generation(
                kind,
                request.body,
                config.model,
                config.default_max_tokens,
                config.max_model_len,
                template=config.chat_template,
                image_patch_px=config.image_patch_px,
            )
        else:
            req = parse_generation(
                kind,
                request.body,
                config.model,
                config.default_max_tokens,
                config.max_model_len,
                self._prompt_tokens,
                config.chat_template,
                config.image_patch_px,
            )
        fault = self._draw_fault(request.arrival_ns)
        if fault is not None and fault.is_http_error:
            self._http_fault(conn, fault)
            return
        stats.prompt_tokens += len(req.tokens)
        self._counter += 1
        prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
        rid = f"{prefix}{self._rid_prefix}{self._counter}"
        tpl = Templates(
            kind, rid, int(time.time()), self._model_json, config.model, config.reasoning_field
        )
        Generation(self, conn, req, request.arrival_ns, fault, tpl).start()

    def _embeddings(self, conn: HttpConnection, request: Request) -> None:
        if self.by_model:
            served = self.by_model.get(_model_named(request.body), self)
            if served is not self:
                served._embeddings(conn, request)
                return
        config = self.config
        stats = self.stats
        stats.requests["embeddings"] = stats.requests.get("embeddings", 0) + 1
        req = parse_embeddings(
            request.body,
            config.model,
            config.max_model_len,
            config.embedding_dims,
            self.tokenizer.encode,
        )
        fault = self._draw_fault(request.arrival_ns, EMBEDDING_FAULTS)
        if fault is not None and fault.is_http_error:
            self._http_fault(conn, fault)
            return
        stats.prompt_tokens += req.prompt_tokens
        self._counter += 1
        rid = f"embd-{self._rid_prefix}{self._counter}"
        Embedding(self, conn, req, request.arrival_ns, fault, rid).start()

    def _draw_fault(
        self, arrival_ns: int, applicable: Collection[Fault] | None = None
    ) -> Fault | None:
        """The fault of a request arriving at ``arrival_ns`` (counted in ``stats.faults``), or
        None; a drawn fault not in ``applicable`` (None: every kind) is served as none."""
        if not self.faults.enabled:
            return None
        fault = self.faults.pick(arrival_ns)
        if fault is None or (applicable is not None and fault not in applicable):
            return None
        self.stats.faults[fault.value] = self.stats.faults.get(fault.value, 0) + 1
        return fault

    def _http_fault(self, conn: HttpConnection, fault: Fault) -> None:
        retry = b"retry-after: %d\r\n" % self.config.faults.retry_after_s
        if fault is Fault.HTTP_429:
            body = error_body(
                "Rate limit reached (simulated)", "rate_limit_error", code="rate_limit_exceeded"
            )
            self._error(conn, 429, body, retry)
        elif fault is Fault.HTTP_503:
            body = error_body("Service unavailable (simulated)", "server_error", code="overloaded")
            self._error(conn, 503, body, retry)
        else:
            self._error(conn, 500, error_body("Internal server error (simulated)", "server_error"))

    # ------------------------------------------------------------------ other endpoints
    def _models(self, conn: HttpConnection, request: Request) -> None:
        models = [
            {
                "id": server.config.model,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "veeksha",
                "root": server.config.model,
                "max_model_len": server.config.max_model_len,
            }
            for server in (self.by_model.values() if self.by_model else (self,))
        ]
        self._reply(conn, self.encode({"object": "list", "data": models}))

    def _tokenizer_server(self, body: dict[str, Any]) -> SimServer:
        """The served model whose tokenizer a /tokenize, /detokenize or /apply-template body
        asks for: with several models, the one its ``model`` names (vLLM's shape: the first
        model when none is named). llama-server serving several models (router mode) refuses a
        body without ``model``, as here with ``tokenize_api: llama_cpp``."""
        if not self.by_model:
            return self
        name = body.get("model")
        if name is None or name == "":
            if self.config.tokenize_api == "llama_cpp":
                raise ApiError(400, "model name is missing from the request")
            return self
        served = self.by_model.get(name) if isinstance(name, str) else None
        if served is None:
            raise ApiError(404, f"model {name!r} not found", code="model_not_found")
        return served

    def _tokenize(self, conn: HttpConnection, request: Request) -> None:
        body = self._json(request)
        served = self._tokenizer_server(body)
        tok = served.endpoint_tokenizer
        llama = self.config.tokenize_api == "llama_cpp"
        if llama:  # llama.cpp: {"content"} → {"tokens"}; no content → no tokens, as it does
            content = body.get("content")
            ids: list[Any] = []
            if isinstance(content, str):
                # (its parse_special, default true: the template's special tokens' texts are
                # those tokens; "add_special" adds nothing, the vocabulary having no BOS of
                # its own: the template writes <s>)
                parse = self.config.chat_template and body.get("parse_special", True) is not False
                ids = special_tokens(content, tok.encode) if parse else tok.encode(content)
            self._tokenizer_reply(conn, {"tokens": ids})
            return
        if "messages" in body:  # (the chat template as the usage counts it, vLLM's default)
            prompt = body.get("add_generation_prompt", True) is not False
            config = served.config  # (an image bigger than the whole context: refused)
            ids = chat_tokens(
                body,
                tok.encode,
                config.chat_template,
                prompt,
                config.image_patch_px,
                config.max_model_len,
            )
        elif isinstance(body.get("prompt"), str):
            ids = tok.encode(body["prompt"])
        else:
            raise ApiError(400, "'prompt' (a string) or 'messages' is required", param="prompt")
        out = {"count": len(ids), "max_model_len": self.config.max_model_len, "tokens": ids}
        self._tokenizer_reply(conn, out)

    def _apply_template(self, conn: HttpConnection, request: Request) -> None:
        """llama.cpp's ``/apply-template``: ``{"messages"}`` → ``{"prompt"}``, the chat template
        rendered with the generation prompt (``chat_text``), which ``/tokenize`` counts as the
        usage of those messages does."""
        body = self._json(request)
        self._tokenizer_server(body)  # (one template for every model: its model is checked)
        self._tokenizer_reply(conn, {"prompt": chat_text(body)})

    def _detokenize(self, conn: HttpConnection, request: Request) -> None:
        body = self._json(request)
        ids = body.get("tokens")
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            raise ApiError(400, "'tokens' must be a list of integers", param="tokens")
        key = "content" if self.config.tokenize_api == "llama_cpp" else "prompt"
        tok = self._tokenizer_server(body).endpoint_tokenizer
        self._tokenizer_reply(conn, {key: tok.decode(ids)})

    def _tokenizer_reply(self, conn: HttpConnection, answer: dict[str, Any]) -> None:
        """Answer a tokenizer call, after the configured faults (a delay, an idle engine)."""
        faults = self.config.faults
        body = self.encode(answer)
        if not faults.tokenize_delay_ms and not faults.tokenize_while_idle:
            self._reply(conn, body)
            return
        self.stats.tokenize_delayed += 1
        self.loop.call_later(faults.tokenize_delay_ms / 1000, self._reply_when_idle, conn, body)

    def _reply_when_idle(self, conn: HttpConnection, body: bytes) -> None:
        slots = self.driver.slots
        if self.config.faults.tokenize_while_idle and (slots.running or slots.waiting):
            self.loop.call_later(_IDLE_POLL_S, self._reply_when_idle, conn, body)
            return
        self._reply(conn, body)

    def _start_profile(self, conn: HttpConnection, request: Request) -> None:
        """vLLM's and SGLang's profiler start: nothing is traced here; it is counted, and so
        are the generation requests that come until the stop."""
        self.stats.profiling = True
        self.stats.profile_starts += 1
        self._reply(conn, b"", b"text/plain")

    def _stop_profile(self, conn: HttpConnection, request: Request) -> None:
        if not self.stats.profiling:
            raise ApiError(400, "the profiler is not running")
        self.stats.profiling = False
        self.stats.profile_stops += 1
        self._reply(conn, b"", b"text/plain")

    def _health(self, conn: HttpConnection, request: Request) -> None:
        self._reply(conn, b"", b"text/plain")

    def _metrics(self, conn: HttpConnection, request: Request) -> None:
        self._reply(conn, self.metrics_text().encode(), b"text/plain; version=0.0.4")

    def _dcgm_metrics(self, conn: HttpConnection, request: Request) -> None:
        """dcgm-exporter's answer for this process' simulated GPUs (``veeksha.simulator.gpus``);
        it ends the period its utilisation and power average over."""
        assert self.gpus is not None
        self._reply(conn, self.gpus.exposition().encode(), b"text/plain; version=0.0.4")

    def metrics_text(self) -> str:
        """Prometheus exposition of this process' counters and gauges: every model it serves
        (``config.models``), each family's samples together under one HELP/TYPE header."""
        if not self.by_model:
            return self._model_metrics_text()
        return merge_families(server._model_metrics_text() for server in self.by_model.values())

    def _model_metrics_text(self) -> str:
        """The exposition of this model's counters and gauges alone."""
        s = self.stats
        slots = self.driver.slots
        cache = self.cache
        queries = cache.query_tokens if cache is not None else 0
        hits = cache.hit_tokens if cache is not None else 0
        label = f'model_name="{self.config.model}",process="{self.process_index}"'
        uptime = (time.monotonic_ns() - self.t0_ns) / 1e9
        lines = [
            "# HELP veeksha_sim_uptime_seconds Seconds since the server started (fault windows).",
            "# TYPE veeksha_sim_uptime_seconds gauge",
            f"veeksha_sim_uptime_seconds{{{label}}} {uptime:.6f}",
            "# HELP veeksha_sim_num_requests_running Requests holding a running slot.",
            "# TYPE veeksha_sim_num_requests_running gauge",
            f"veeksha_sim_num_requests_running{{{label}}} {len(slots.running)}",
            "# HELP veeksha_sim_num_requests_waiting Requests waiting for a slot.",
            "# TYPE veeksha_sim_num_requests_waiting gauge",
            f"veeksha_sim_num_requests_waiting{{{label}}} {len(slots.waiting)}",
            "# HELP veeksha_sim_prefix_cache_hit_rate Cached share of prompt tokens so far.",
            "# TYPE veeksha_sim_prefix_cache_hit_rate gauge",
            f"veeksha_sim_prefix_cache_hit_rate{{{label}}} {hits / queries if queries else 0.0}",
            "# TYPE veeksha_sim_prefix_cache_queries_total counter",
            f"veeksha_sim_prefix_cache_queries_total{{{label}}} {queries}",
            "# TYPE veeksha_sim_prefix_cache_hits_total counter",
            f"veeksha_sim_prefix_cache_hits_total{{{label}}} {hits}",
            "# HELP veeksha_sim_prefix_cache_resets_total Calls that emptied the prefix cache.",
            "# TYPE veeksha_sim_prefix_cache_resets_total counter",
            f"veeksha_sim_prefix_cache_resets_total{{{label}}} {self.cache_calls.resets}",
            "# HELP veeksha_sim_prompt_tokens_total Prompt tokens received.",
            "# TYPE veeksha_sim_prompt_tokens_total counter",
            f"veeksha_sim_prompt_tokens_total{{{label}}} {s.prompt_tokens}",
            "# HELP veeksha_sim_generation_tokens_total Tokens generated.",
            "# TYPE veeksha_sim_generation_tokens_total counter",
            f"veeksha_sim_generation_tokens_total{{{label}}} {s.generation_tokens}",
            "# TYPE veeksha_sim_requests_cancelled_total counter",
            f"veeksha_sim_requests_cancelled_total{{{label}}} {s.cancelled}",
            "# HELP veeksha_sim_profiler_active Whether the profiler runs (/start_profile).",
            "# TYPE veeksha_sim_profiler_active gauge",
            f"veeksha_sim_profiler_active{{{label}}} {int(s.profiling)}",
            "# TYPE veeksha_sim_profile_starts_total counter",
            f"veeksha_sim_profile_starts_total{{{label}}} {s.profile_starts}",
            "# TYPE veeksha_sim_profile_stops_total counter",
            f"veeksha_sim_profile_stops_total{{{label}}} {s.profile_stops}",
            "# HELP veeksha_sim_profiled_requests_total Model requests while it ran.",
            "# TYPE veeksha_sim_profiled_requests_total counter",
            f"veeksha_sim_profiled_requests_total{{{label}}} {s.profiled_requests}",
            "# TYPE veeksha_sim_requests_total counter",
        ]
        lines += [
            f'veeksha_sim_requests_total{{{label},endpoint="{k}"}} {v}'
            for k, v in s.requests.items()
        ]
        lines.append("# TYPE veeksha_sim_errors_total counter")
        lines += [
            f'veeksha_sim_errors_total{{{label},status="{k}"}} {v}' for k, v in s.errors.items()
        ]
        if s.header_values:
            header = _label(self.config.count_header or "")
            lines.append("# TYPE veeksha_sim_header_requests_total counter")
            lines += [
                f'veeksha_sim_header_requests_total{{{label},header="{header}",'
                f'value="{_label(k)}"}} {v}'
                for k, v in s.header_values.items()
            ]
        lines.append("# TYPE veeksha_sim_faults_total counter")
        lines += [
            f'veeksha_sim_faults_total{{{label},kind="{k}"}} {v}' for k, v in s.faults.items()
        ]
        lines += vllm_lines(
            f'model_name="{self.config.model}",engine="{self.process_index}"',
            s.vllm,
            running=len(slots.running),
            waiting=len(slots.waiting),
            kv_usage=self._kv_usage(),
            cache_queries=queries,
            cache_hits=hits,
            prompt_tokens=s.prompt_tokens,
            generation_tokens=s.generation_tokens,
        )
        return "\n".join(lines) + "\n"

    def _kv_usage(self) -> float:
        """KV blocks the running sequences hold over the KV capacity (docs: vllm_metrics)."""
        config = self.config
        block = config.prefix_cache_block_size
        capacity = config.prefix_cache_tokens or (config.max_num_seqs or 1) * config.max_model_len
        running = self.driver.slots.running
        held = sum(-(-(seq.prompt_tokens + seq.generated) // block) for seq in running)
        return min(held * block / capacity, 1.0) if capacity else 0.0


#: The paths of model requests (the profiler's and ``count_header``'s counts).
_MODEL_PATHS = frozenset((b"/v1/chat/completions", b"/v1/completions", b"/v1/embeddings"))
#: The paths that answer while the server loads (``loading_s``), as llama.cpp lets its models'
#: list through then (and /metrics: a scrape is no request)
_LOADING_OPEN = frozenset((b"/metrics", b"/v1/models", b"/models"))
#: The paths ``required_headers`` leave open: the readiness wait's, and the GPU exporter's
#: (a dcgm-exporter is no part of the gateway: veeksha sends its scrapes no key)
_OPEN_PATHS = frozenset((b"/health", b"/dcgm/metrics"))


def _label(text: str) -> str:
    """``text`` as a Prometheus label value (backslash, quote and line feed escaped)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def merge_families(texts: Iterable[str]) -> str:
    """Several expositions of the same families (one per model) as one: each family's HELP and
    TYPE once, then its samples from every text in order (the format wants a family's samples
    together)."""
    families: dict[str, tuple[list[str], list[str]]] = {}
    for text in texts:
        current: list[str] | None = None
        for line in text.splitlines():
            if line.startswith(("# HELP ", "# TYPE ")):
                name = line.split(" ", 3)[2]
                headers, current = families.setdefault(name, ([], []))
                if line not in headers:
                    headers.append(line)
            elif line and current is not None:
                current.append(line)
    return "".join("\n".join([*headers, *samples]) + "\n" for headers, samples in families.values())
