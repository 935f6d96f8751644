"""The simulator's settings as its process uses them: typed, read-only structs decoded from the
JSON of a validated ``SimulatorConfig`` (``veeksha.scenario.simulator``), without pydantic.

The models validate (ranges, presets, the fault rates' sum) where settings come from a user:
the scenario, ``veeksha sim-server``'s options and ``--config``. Their dump is complete (every
preset applied), so the process that serves needs only to read it: ``SimulatorProcess`` hands
it over as ``--settings-json``, and the server's process never builds the models (pydantic and
the three models are about half of its start-up). Every field is required and an unknown one is
an error, so a field added to the models and not here fails every simulator test at once
(``tests/unit/simulator/test_settings.py`` also compares the two field by field).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from veeksha.scenario.sim_presets import FAULT_KINDS, PRESETS, apply_model_settings

__all__ = ["FaultSettings", "ModelSettings", "SimSettings"]


class FaultSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``FaultConfig``'s values (see there)."""

    http_500_rate: float
    http_503_rate: float
    http_429_rate: float
    disconnect_rate: float
    stall_rate: float
    malformed_sse_rate: float
    slow_headers_rate: float
    never_ending_rate: float
    retry_after_s: int
    stall_s: float
    slow_headers_s: float
    after_tokens: int
    never_ending_interval_s: float
    window_start_s: float
    window_end_s: float | None
    tokenize_delay_ms: float
    tokenize_while_idle: bool
    invalid_answer_probability: float
    tokenize_mismatch: bool

    def rate(self, kind: str) -> float:
        """Rate of one fault kind (one of FAULT_KINDS)."""
        return float(getattr(self, f"{kind}_rate"))

    @property
    def any(self) -> bool:
        """Whether any fault can happen at all."""
        return any(self.rate(kind) > 0 for kind in FAULT_KINDS)


class ModelSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``SimulatorModel``'s values: None is the ``simulator:`` section's."""

    preset: Literal["fast", "realistic"] | None
    timing: Literal["fixed", "engine"] | None
    ttft_ms: float | None
    itl_ms: float | None
    max_num_seqs: int | None
    prefill_tokens_per_s: float | None
    decode_step_ms: float | None
    decode_step_ms_per_seq: float | None
    prefix_cache_tokens: int | None
    max_model_len: int | None
    default_max_tokens: int | None
    tokens_per_chunk: int | None
    faults: FaultSettings | None
    reasoning_tokens: int | None = None
    image_patch_px: int | None = None
    embedding_dims: int | None = None


class SimSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``SimulatorConfig``'s values, presets applied (see there)."""

    preset: Literal["fast", "realistic"]
    model: str
    processes: int
    seed: int
    tokenizer: Literal["builtin", "subword", "bytes"]
    tokenize_api: Literal["vllm", "llama_cpp"]
    chat_template: bool
    timing: Literal["fixed", "engine"] | None
    ttft_ms: float | None
    itl_ms: float | None
    max_num_seqs: int | None
    prefill_tokens_per_s: float | None
    decode_step_ms: float | None
    decode_step_ms_per_seq: float | None
    prefix_cache_tokens: int | None
    prefix_cache_block_size: int
    prefix_cache_ttl_s: float | None
    max_model_len: int
    default_max_tokens: int
    tokens_per_chunk: int
    role_chunk: bool
    record_chunk_times: bool
    faults: FaultSettings
    models: dict[str, ModelSettings]
    required_headers: dict[str, str] = {}
    count_header: str | None = None
    cache_reset_api: Literal["vllm", "sglang", "llama_cpp", "none"] = "vllm"
    spec_tokens: int = 0
    spec_acceptance: float = 0.7
    reasoning_tokens: int = 0
    reasoning_field: Literal["reasoning_content", "reasoning", "inline", "template"] = (
        "reasoning_content"
    )
    image_patch_px: int = 28
    embedding_dims: int = 64
    gpus: int = 0
    gpu_idle_watts: float = 80.0
    gpu_busy_watts: float = 700.0
    loading_s: float = 0.0

    @classmethod
    def from_json(cls, text: str | bytes) -> SimSettings:
        """The settings of a validated config's JSON (``SimulatorConfig.model_dump_json()``)."""
        return msgspec.json.decode(text, type=cls)

    def to_json(self) -> str:
        """What ``from_json`` reads back (for the server's other processes)."""
        return msgspec.json.encode(self).decode()

    def served_models(self) -> list[str]:
        """Every model name the simulator answers to: ``model`` first, then ``models``."""
        return [self.model, *(name for name in self.models if name != self.model)]

    def for_model(self, name: str) -> SimSettings:
        """The effective settings of one served model (``model`` itself: these, models
        dropped): as ``SimulatorConfig.for_model``."""
        base: dict[str, Any] = msgspec.structs.asdict(self)
        base["models"] = {}
        base["model"] = name
        extra = self.models.get(name)
        if extra is not None:
            changes = {
                key: value
                for key, value in msgspec.structs.asdict(extra).items()
                if value is not None
            }
            apply_model_settings(base, changes)
        for key, value in PRESETS[base["preset"]].items():
            if base.get(key) is None:
                base[key] = value
        return SimSettings(**base)

    @property
    def instant(self) -> bool:
        """True when responses involve no delay at all (fixed timing with zero TTFT and ITL)."""
        return self.timing == "fixed" and not self.ttft_ms and not self.itl_ms
