"""The simulator's fault kinds and presets: plain data, without pydantic, so that the
simulator's process can read them without loading the settings' models
(``veeksha.simulator.settings``)."""

from __future__ import annotations

from typing import Any

__all__ = ["FAULT_KINDS", "PRESETS", "apply_model_settings"]

FAULT_KINDS = (
    "http_500",
    "http_503",
    "http_429",
    "disconnect",
    "stall",
    "malformed_sse",
    "slow_headers",
    "never_ending",
)

#: Effective values of the timing and capacity fields for each preset.
PRESETS: dict[str, dict[str, Any]] = {
    # No delays at all: every response is written at once. For benchmarking the load generator.
    "fast": {
        "timing": "fixed",
        "ttft_ms": 0.0,
        "itl_ms": 0.0,
        "max_num_seqs": 1024,
        "prefill_tokens_per_s": 0.0,
        "decode_step_ms": 0.0,
        "decode_step_ms_per_seq": 0.0,
        "prefix_cache_tokens": 1_000_000,
    },
    # In the spirit of an 8B model in bf16 on one 80 GB GPU (vLLM-like continuous batching).
    "realistic": {
        "timing": "engine",
        "ttft_ms": 0.0,
        "itl_ms": 0.0,
        "max_num_seqs": 256,
        "prefill_tokens_per_s": 20_000.0,
        "decode_step_ms": 6.0,
        "decode_step_ms_per_seq": 0.05,
        "prefix_cache_tokens": 400_000,
    },
}


def apply_model_settings(base: dict[str, Any], changes: dict[str, Any]) -> None:
    """Put one served model's own settings (``changes``: its non-None values) over the
    ``simulator:`` section's (``base``); a model's own preset fills what the model leaves out."""
    preset = changes.get("preset")
    if preset is not None:
        for key in PRESETS[preset]:
            if key not in changes:
                base[key] = None
    base.update(changes)
