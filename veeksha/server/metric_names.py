"""The important metrics of each engine, by name, and the canonical names veeksha reads them as.

- running: vLLM ``num_requests_running``, SGLang ``num_running_reqs``, llama.cpp
  ``requests_processing``, TGI ``tgi_batch_current_size``
- waiting: vLLM ``num_requests_waiting``, SGLang ``num_queue_reqs``, llama.cpp
  ``requests_deferred``, TGI ``tgi_queue_size``
- kv_usage (0-1): vLLM ``kv_cache_usage_perc`` (``gpu_cache_usage_perc`` before 0.10), SGLang
  ``token_usage``, llama.cpp ``kv_cache_usage_ratio``
- prefix_hits, prefix_queries: vLLM ``prefix_cache_hits_total``, ``prefix_cache_queries_total``
  (``gpu_prefix_cache_*`` in older versions)
- prefix_hit_rate: SGLang ``cache_hit_rate``
- preemptions: vLLM ``num_preemptions_total``
- finished: vLLM ``request_success_total``, SGLang ``e2e_request_latency_seconds_count``, TGI
  ``tgi_request_success``
- spec_drafts, spec_draft_tokens, spec_accepted, spec_accepted_per_pos: vLLM's speculative
  decoding, ``spec_decode_num_drafts_total``, ``spec_decode_num_draft_tokens_total``,
  ``spec_decode_num_accepted_tokens_total`` and ``spec_decode_num_accepted_tokens_per_pos_total``
  (one series per draft ``position``)

(vLLM's names carry the prefix ``vllm:``, SGLang's ``sglang:``, llama.cpp's ``llamacpp:``.)
Prefix hits and queries are counters of tokens; their deltas over the run give the hit rate as
the server saw it. Anything else a server exports is stored raw (``canonical`` null).

A canonical series is read from the first of its names a scrape holds (so a server exporting
both vLLM KV names is not counted twice), summed over its label sets (data-parallel engines,
finish reasons), or for ratios (kv_usage, prefix_hit_rate) the largest of them.
"""

from __future__ import annotations

__all__ = ["CANONICAL", "RATIOS", "canonical_name"]

#: canonical name → the metric names that give it, in order of preference
CANONICAL: dict[str, tuple[str, ...]] = {
    "running": (
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "llamacpp:requests_processing",
        "tgi_batch_current_size",
    ),
    "waiting": (
        "vllm:num_requests_waiting",
        "sglang:num_queue_reqs",
        "llamacpp:requests_deferred",
        "tgi_queue_size",
    ),
    "kv_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
        "llamacpp:kv_cache_usage_ratio",
    ),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_hit_rate": ("sglang:cache_hit_rate",),
    "preemptions": ("vllm:num_preemptions_total",),
    "finished": (
        "vllm:request_success_total",
        "sglang:e2e_request_latency_seconds_count",
        "tgi_request_success",
    ),
    "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted": ("vllm:spec_decode_num_accepted_tokens_total",),
    "spec_accepted_per_pos": ("vllm:spec_decode_num_accepted_tokens_per_pos_total",),
}

#: canonical names that are ratios (the largest series is read, not the sum)
RATIOS = frozenset({"kv_usage", "prefix_hit_rate"})

_BY_METRIC = {metric: name for name, metrics in CANONICAL.items() for metric in metrics}


def canonical_name(metric: str) -> str | None:
    """The canonical name of a sample's metric name, or None (stored raw)."""
    return _BY_METRIC.get(metric)
