"""Settings of the built-in simulated LLM server (the `simulator:` section of a scenario).

Owned by the simulator (veeksha/simulator/); kept here so the scenario package imports nothing
from the runtime. See docs/simulator.md for the engine model these numbers drive.

A preset fills every timing and capacity field left unset (``None``); a field set explicitly
always wins. After validation every field holds its effective value, so ``model_dump()`` is the
complete record of what the server did.

>>> SimulatorConfig(preset="realistic").decode_step_ms
6.0
>>> SimulatorConfig(preset="realistic", decode_step_ms=3).decode_step_ms
3.0
"""

from typing import Any, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from veeksha.scenario.base import KeyProblem, NumbersModel, empty_dict
from veeksha.scenario.sim_presets import FAULT_KINDS, PRESETS, apply_model_settings

__all__ = ["PRESETS", "FaultConfig", "SimulatorConfig", "SimulatorModel"]


class FaultConfig(NumbersModel):
    """Seeded, per-request fault injection.

    Each request draws one uniform number from the server's fault stream and gets at most one
    fault, chosen by the cumulative rates below (so the rates must sum to at most 1). Faults are
    only injected inside the window ``[window_start_s, window_end_s)`` measured from server start.
    """

    model_config = ConfigDict(extra="forbid")

    http_500_rate: float = Field(0.0, ge=0, le=1, description="Share answered HTTP 500.")
    http_503_rate: float = Field(
        0.0, ge=0, le=1, description="Share answered HTTP 503 with Retry-After."
    )
    http_429_rate: float = Field(
        0.0, ge=0, le=1, description="Share answered HTTP 429 with Retry-After."
    )
    disconnect_rate: float = Field(
        0.0, ge=0, le=1, description="Share whose connection is closed mid-stream."
    )
    stall_rate: float = Field(
        0.0, ge=0, le=1, description="Share that send no bytes for stall_s mid-stream."
    )
    malformed_sse_rate: float = Field(
        0.0, ge=0, le=1, description="Share that get one malformed SSE line mid-stream."
    )
    slow_headers_rate: float = Field(
        0.0, ge=0, le=1, description="Share whose response headers wait slow_headers_s."
    )
    never_ending_rate: float = Field(
        0.0, ge=0, le=1, description="Share whose stream sends tokens forever, never finishing."
    )
    retry_after_s: int = Field(1, ge=0, description="Retry-After header of 429 and 503 answers.")
    stall_s: float = Field(2.0, ge=0, description="Length of a stall, seconds.")
    slow_headers_s: float = Field(2.0, ge=0, description="Delay before headers, seconds.")
    after_tokens: int = Field(
        1, ge=0, description="Mid-stream faults strike after this many content chunks."
    )
    never_ending_interval_s: float = Field(
        0.05, gt=0, description="Gap between the chunks of a never-ending response, seconds."
    )
    window_start_s: float = Field(
        0.0, ge=0, description="Faults only from this many seconds after server start."
    )
    window_end_s: float | None = Field(
        None, ge=0, description="Faults only before this many seconds after start (null: no end)."
    )
    tokenize_delay_ms: float = Field(
        0.0, ge=0, description="Every /tokenize and /detokenize answer waits this long, ms."
    )
    tokenize_while_idle: bool = Field(
        False,
        description="/tokenize and /detokenize answer only while no generation is running.",
    )
    invalid_answer_probability: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of answers whose first word is INVALID (seeded): answers that fail "
        "a validation such as pattern '^(?!INVALID)' (docs/agents.md, re-prompts).",
    )
    tokenize_mismatch: bool = Field(
        False,
        description="/tokenize and /detokenize use another tokenizer than the usage counts "
        "(subword for builtin, else builtin): a tokenize endpoint that disagrees with usage.",
    )

    @model_validator(mode="after")
    def _rates_sum_to_at_most_one(self) -> Self:
        total = sum(self.rate(kind) for kind in FAULT_KINDS)
        if total > 1.0 + 1e-9:
            rates = [f"{kind}_rate" for kind in FAULT_KINDS if self.rate(kind) > 0]
            raise KeyProblem(f"fault rates sum to {total:g}; they must sum to at most 1", *rates)
        if self.window_end_s is not None and self.window_end_s < self.window_start_s:
            raise KeyProblem(
                f"must not be before window_start_s (got {self.window_end_s:g} < "
                f"{self.window_start_s:g})",
                "window_end_s",
                "window_start_s",
            )
        return self

    def rate(self, kind: str) -> float:
        """Rate of one fault kind (one of FAULT_KINDS)."""
        return float(getattr(self, f"{kind}_rate"))

    @property
    def any(self) -> bool:
        """Whether any fault can happen at all."""
        return any(self.rate(kind) > 0 for kind in FAULT_KINDS)


class SimulatorModel(NumbersModel):
    """One more model the simulator serves (``simulator.models: {name: {...}}``): each key left
    out is the ``simulator:`` section's; ``preset`` refills the timing keys left out here."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    preset: Literal["fast", "realistic"] | None = Field(None, description="As simulator.preset.")
    timing: Literal["fixed", "engine"] | None = Field(None, description="As simulator.timing.")
    ttft_ms: float | None = Field(None, ge=0, description="As simulator.ttft_ms.")
    itl_ms: float | None = Field(None, ge=0, description="As simulator.itl_ms.")
    max_num_seqs: int | None = Field(None, ge=1, description="This model's running slots.")
    prefill_tokens_per_s: float | None = Field(None, ge=0, description="As simulator's.")
    decode_step_ms: float | None = Field(None, ge=0, description="As simulator's.")
    decode_step_ms_per_seq: float | None = Field(None, ge=0, description="As simulator's.")
    prefix_cache_tokens: int | None = Field(None, ge=0, description="As simulator's.")
    max_model_len: int | None = Field(None, ge=2, description="As simulator's.")
    default_max_tokens: int | None = Field(None, ge=1, description="As simulator's.")
    tokens_per_chunk: int | None = Field(None, ge=1, description="As simulator's.")
    reasoning_tokens: int | None = Field(None, ge=0, description="As simulator's.")
    image_patch_px: int | None = Field(None, ge=1, description="As simulator's.")
    embedding_dims: int | None = Field(None, ge=1, le=8192, description="As simulator's.")
    faults: FaultConfig | None = Field(None, description="This model's faults (whole section).")


class SimulatorConfig(NumbersModel):
    """Timing model, capacity and faults of the built-in OpenAI-compatible server."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    preset: Literal["fast", "realistic"] = Field(
        "fast", description="fast: no delays; realistic: timing in the spirit of an 8B model."
    )
    model: str = Field("veeksha-sim", min_length=1, description="Model name the simulator serves.")
    processes: int = Field(1, ge=1, description="Server processes (SO_REUSEPORT).")
    seed: int = Field(0, ge=0, description="Seed of output text, output lengths and faults.")
    tokenizer: Literal["builtin", "subword", "bytes"] = Field(
        "builtin",
        description="Counts prompts and answers: builtin (veeksha's, one token a word), "
        "subword (its own: words split into syllable tokens, unlike builtin) or bytes (one "
        "token a byte; answers still count one a word).",
    )
    tokenize_api: Literal["vllm", "llama_cpp"] = Field(
        "vllm",
        description='/tokenize and /detokenize shape: vllm ({"prompt"} → {"tokens", "count"}) '
        'or llama_cpp ({"content"} → {"tokens"}).',
    )
    cache_reset_api: Literal["vllm", "sglang", "llama_cpp", "none"] = Field(
        "vllm",
        description="Which call empties the prefix cache, as that server answers it: vllm "
        "(POST /reset_prefix_cache), sglang (POST /flush_cache), llama_cpp (GET /slots, "
        "POST /slots/{id}?action=erase) or none (404, as vLLM without its dev mode).",
    )
    loading_s: float = Field(
        0.0,
        ge=0,
        description="Seconds after it starts during which it answers every call but its models' "
        'list and /metrics HTTP 503 "Loading model", as llama.cpp does while it loads its '
        "weights (a client's ready_timeout waits it out).",
    )
    chat_template: bool = Field(
        False,
        description="Wrap chat messages in a ChatML-like template of special tokens, as real "
        "servers do: a prompt of one message counts 9 tokens more than its content, each "
        "later turn 10 (usage, prefix cache, max_model_len, /tokenize with messages, and "
        "with tokenize_api llama_cpp /apply-template).",
    )

    timing: Literal["fixed", "engine"] | None = Field(
        None,
        description=(
            "fixed: every request gets ttft_ms then itl_ms per token, independent of load; "
            "engine: continuous batching (prefill and decode steps shared by the batch)."
        ),
    )
    ttft_ms: float | None = Field(
        None, ge=0, description="fixed timing: time from scheduling to the first token, ms."
    )
    itl_ms: float | None = Field(None, ge=0, description="fixed timing: gap between tokens, ms.")
    max_num_seqs: int | None = Field(
        None, ge=1, description="Running slots; more requests wait in a FIFO queue."
    )
    prefill_tokens_per_s: float | None = Field(
        None, ge=0, description="engine timing: prefill speed on uncached tokens (0: instant)."
    )
    decode_step_ms: float | None = Field(
        None, ge=0, description="engine timing: fixed cost of one batch step, ms."
    )
    decode_step_ms_per_seq: float | None = Field(
        None, ge=0, description="engine timing: extra step cost per sequence in the batch, ms."
    )
    prefix_cache_tokens: int | None = Field(
        None, ge=0, description="Prefix cache capacity in tokens, LRU (0: no prefix cache)."
    )
    prefix_cache_block_size: int = Field(
        16, ge=1, description="Tokens per prefix-cache block; only full blocks are cached."
    )
    prefix_cache_ttl_s: float | None = Field(
        None, gt=0, description="Cached blocks unused for this long are dropped (null: never)."
    )
    max_model_len: int = Field(
        131_072,
        ge=2,
        description="Prompt plus max output tokens allowed (400 beyond); left out, veeksha run "
        "takes the largest client.max_model_len of the clients the simulator serves.",
    )
    default_max_tokens: int = Field(
        256, ge=1, description="Output limit of requests that send no max_tokens."
    )
    tokens_per_chunk: int = Field(1, ge=1, description="Tokens per streamed SSE chunk.")
    spec_tokens: int = Field(
        0,
        ge=0,
        le=16,
        description="Speculative decoding's draft tokens per step (vLLM's "
        "num_speculative_tokens); with k > 0, /metrics counts the drafts and accepted tokens of "
        "each answer under vLLM's spec_decode names (its timing is unchanged).",
    )
    spec_acceptance: float = Field(
        0.7,
        ge=0,
        le=1,
        description="With spec_tokens: the chance that a draft token is accepted, given that "
        "the ones before it in its draft were.",
    )
    reasoning_tokens: int = Field(
        0,
        ge=0,
        description=(
            "A reasoning model: the first N tokens of each chat answer are its thinking,"
            " streamed in delta.<reasoning_field> (message.<reasoning_field> unstreamed) and"
            " counted in usage.completion_tokens_details.reasoning_tokens; an answer of N tokens"
            " or fewer is all thinking. 0: none."
        ),
    )
    reasoning_field: Literal["reasoning_content", "reasoning", "inline", "template"] = Field(
        "reasoning_content",
        description=(
            "The key of the thinking: reasoning_content (vLLM's and SGLang's reasoning parsers,"
            " DeepSeek, llama.cpp) or reasoning (newer vLLM); inline: in the content, between"
            " <think> and </think>, with no reasoning_tokens in the usage (a server without a"
            " reasoning parser); template: likewise, but the chat template opened <think> in"
            " the prompt, so the content starts inside the block (client.thinking_opened)."
        ),
    )
    image_patch_px: int = Field(
        28,
        ge=1,
        description=(
            "A chat's image (a data: URL of a PNG or JPEG in an image_url part) counts"
            " ceil(width / N) * ceil(height / N) prompt tokens: one token an N × N-pixel patch"
            " (28: Qwen2-VL's merged patch)."
        ),
    )
    embedding_dims: int = Field(
        64,
        ge=1,
        le=8192,
        description=(
            "Numbers in each vector of POST /v1/embeddings (an embedding model's size); a"
            " request's dimensions may ask for fewer."
        ),
    )
    gpus: int = Field(
        0,
        ge=0,
        description=(
            "Simulated GPUs of each server process, answered at GET /dcgm/metrics as NVIDIA's"
            " dcgm-exporter answers (utilisation, power, energy, memory, clocks), busy while any"
            " request holds a running slot; every GPU reports the same load (tensor"
            " parallelism). 0: none (/dcgm/metrics is a 404)."
        ),
    )
    gpu_idle_watts: float = Field(
        80.0, ge=0, description="Power of a simulated GPU while no request runs, W."
    )
    gpu_busy_watts: float = Field(
        700.0,
        gt=0,
        description="Power of a simulated GPU while any request runs, W (at least gpu_idle_watts).",
    )
    role_chunk: bool = Field(
        False,
        description=(
            "Chat streams start with a chunk carrying role 'assistant' and empty content, "
            "sent with the headers (as OpenAI and vLLM do)."
        ),
    )
    record_chunk_times: bool = Field(
        False, description="timings also lists the write time (ns) of every content chunk."
    )
    faults: FaultConfig = Field(FaultConfig.model_validate({}), description="Fault injection.")
    required_headers: dict[str, str] = Field(
        default_factory=empty_dict,
        description="Headers every request but GET /health and /dcgm/metrics must carry, "
        "name → value, as a gateway checks its key: without one (or with another value) the "
        "answer is 401 with an OpenAI-style error. A credential's value (a name holding auth, "
        "key, token...) is written as ***.",
    )
    count_header: str | None = Field(
        None,
        description="Count the generation and embedding requests by the value of this header "
        "(e.g. X-Session-Id): /metrics' veeksha_sim_header_requests_total{value=...}.",
    )
    models: dict[str, SimulatorModel] = Field(
        default_factory=empty_dict,
        description="More models served by the same process, each with its own engine "
        "(its own slots, cache and timing): name → the keys that differ from this section.",
    )

    @model_validator(mode="after")
    def _busy_at_least_idle(self) -> Self:
        if self.gpu_busy_watts < self.gpu_idle_watts:
            raise KeyProblem(
                f"must be at least gpu_idle_watts (got {self.gpu_busy_watts:g} < "
                f"{self.gpu_idle_watts:g})",
                "gpu_busy_watts",
                "gpu_idle_watts",
            )
        return self

    @model_validator(mode="after")
    def _header_names(self) -> Self:
        from veeksha.scenario.clients import header_name_problem, header_value_problem

        for name, value in self.required_headers.items():
            problem = header_name_problem(name) or header_value_problem(value)
            if problem is not None:
                raise KeyProblem(problem, ("required_headers", name))
        if self.count_header is not None:
            problem = header_name_problem(self.count_header)
            if problem is not None:
                raise KeyProblem(problem, "count_header")
        return self

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        preset = data.get("preset", "fast")
        values = PRESETS.get(preset) if isinstance(preset, str) else None
        if values is None:
            return data  # the Literal check reports the bad preset
        merged = dict(data)
        for key, value in values.items():
            if merged.get(key) is None:
                merged[key] = value
        return merged

    def served_models(self) -> list[str]:
        """Every model name the simulator answers to: ``model`` first, then ``models``."""
        return [self.model, *(name for name in self.models if name != self.model)]

    def for_model(self, name: str) -> "SimulatorConfig":
        """The effective config of one served model (``model`` itself: this one, models
        dropped)."""
        base = self.model_dump()
        base["models"] = {}
        base["model"] = name
        extra = self.models.get(name)
        if extra is not None:
            apply_model_settings(base, extra.model_dump(exclude_none=True))
        return SimulatorConfig.model_validate(base)

    @property
    def instant(self) -> bool:
        """True when responses involve no delay at all (fixed timing with zero TTFT and ITL)."""
        return self.timing == "fixed" and not self.ttft_ms and not self.itl_ms
