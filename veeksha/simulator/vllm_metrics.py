"""The simulator's ``/metrics`` under vLLM's names, from its own engine model.

So that a scraper built for vLLM reads the simulator unchanged (and the tests exercise it end to
end), ``/metrics`` carries, besides the simulator's own ``veeksha_sim_*`` series, these vLLM
series, each labelled ``model_name`` (and ``engine``: the simulator process that answered):

=====================================  =========  ==================================================
``vllm:num_requests_running``          gauge      sequences holding one of ``max_num_seqs`` slots
``vllm:num_requests_waiting``          gauge      sequences queued for a slot
``vllm:kv_cache_usage_perc``           gauge      KV blocks of the running sequences (prompt and
``vllm:gpu_cache_usage_perc``                     generated tokens) over the KV capacity, 0-1; the
                                                  capacity is ``prefix_cache_tokens`` (else
                                                  ``max_num_seqs × max_model_len``); both names
``vllm:prefix_cache_queries_total``    counter    prompt tokens looked up in the prefix cache
``vllm:prefix_cache_hits_total``       counter    of them, tokens found there
``vllm:num_preemptions_total``         counter    always 0: the simulator never preempts
``vllm:prompt_tokens_total``           counter    prompt tokens received
``vllm:generation_tokens_total``       counter    tokens generated (counted when a request ends)
``vllm:request_success_total``         counter    requests ended, by ``finished_reason``: ``stop``,
                                                  ``length`` (hit max_tokens), ``abort`` (client
                                                  went away, or an injected disconnect cut it)
``vllm:time_to_first_token_seconds``   histogram  arrival → first token, per finished request
``vllm:e2e_request_latency_seconds``   histogram  arrival → last token, per finished request
``vllm:request_queue_time_seconds``    histogram  arrival → its slot (scheduled), per generated
                                                  request that finished (vLLM's buckets of e2e)
``vllm:request_prefill_time_seconds``  histogram  scheduled → first token, likewise
``vllm:request_decode_time_seconds``   histogram  first token → last token, likewise
``vllm:spec_decode_num_drafts_total``  counter    with ``spec_tokens`` k > 0 only: the drafts of
``vllm:spec_decode_num_draft_tokens_``            the finished answers (``SpecDrafts``), their k
``total``                                         tokens each, the accepted ones, and those by
``vllm:spec_decode_num_accepted_``                ``position`` in their draft
``tokens_total``
``vllm:spec_decode_num_accepted_``
``tokens_per_pos_total``
=====================================  =========  ==================================================

Generated on request only: nothing is computed per token, and per request only two histogram
observations (a bisect each) when it ends. A simulator serving several models
(``simulator.models``) answers every model's series in one exposition, each under its own
``model_name``. With ``processes > 1`` each process answers with its own numbers (the one the
scrape's connection reached, labelled ``engine``).
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

__all__ = ["Histogram", "SpecDrafts", "VllmCounters", "vllm_lines"]

#: vLLM's buckets of time_to_first_token_seconds (the e2e histogram uses the same, plus longer).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)


@dataclass(slots=True)
class Histogram:
    """Cumulative-on-output Prometheus histogram: per-bucket counts, sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = [f"# TYPE {name} histogram"]
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {running}')
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


@dataclass(slots=True)
class SpecDrafts:
    """Speculative decoding's counters, drawn per finished answer: after its first token (the
    prefill's), each step drafts ``k`` tokens; each is accepted with chance ``acceptance`` while
    the ones before it were; the step yields the accepted ones and one of the target model's
    (never more than the answer has left). Seeded: the same answers, the same counts."""

    k: int
    acceptance: float
    rng: random.Random
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    by_position: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.by_position = [0] * self.k

    def answered(self, tokens: int) -> None:
        """An answer of ``tokens`` tokens was generated."""
        left = tokens - 1
        draw = self.rng.random
        while left > 0:
            taken = 0
            while taken < self.k and taken < left - 1 and draw() < self.acceptance:
                self.by_position[taken] += 1
                taken += 1
            self.drafts += 1
            self.draft_tokens += self.k
            self.accepted += taken
            left -= taken + 1

    def lines(self, labels: str) -> list[str]:
        name = "vllm:spec_decode_num"
        out = [
            f"# TYPE {name}_drafts_total counter",
            f"{name}_drafts_total{{{labels}}} {float(self.drafts)}",
            f"# TYPE {name}_draft_tokens_total counter",
            f"{name}_draft_tokens_total{{{labels}}} {float(self.draft_tokens)}",
            f"# TYPE {name}_accepted_tokens_total counter",
            f"{name}_accepted_tokens_total{{{labels}}} {float(self.accepted)}",
            f"# TYPE {name}_accepted_tokens_per_pos_total counter",
        ]
        out += [
            f'{name}_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {float(n)}'
            for i, n in enumerate(self.by_position)
        ]
        return out


@dataclass(slots=True)
class VllmCounters:
    """What the vLLM series need beyond the simulator's own stats."""

    finished: dict[str, int] = field(default_factory=dict)
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    queue: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    prefill: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    decode: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    spec: SpecDrafts | None = None  # (``spec_tokens`` > 0: speculative decoding's counters)

    def ended(
        self,
        reason: str,
        ttft_s: float | None,
        e2e_s: float | None,
        phases_s: tuple[float, float, float] | None = None,
    ) -> None:
        """A request ended (``stop``, ``length`` or ``abort``); its times if it answered, and
        ``phases_s``, its (queue, prefill, decode) seconds if it was generated."""
        self.finished[reason] = self.finished.get(reason, 0) + 1
        if ttft_s is not None:
            self.ttft.observe(ttft_s)
        if e2e_s is not None:
            self.e2e.observe(e2e_s)
        if phases_s is not None:
            queue, prefill, decode = phases_s
            self.queue.observe(queue)
            self.prefill.observe(prefill)
            self.decode.observe(decode)


def vllm_lines(
    labels: str,
    counters: VllmCounters,
    *,
    running: int,
    waiting: int,
    kv_usage: float,
    cache_queries: int,
    cache_hits: int,
    prompt_tokens: int,
    generation_tokens: int,
) -> list[str]:
    """The vLLM-named exposition lines (``labels``: ``model_name="m",engine="0"``)."""
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} {float(running)}",
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{labels}}} {float(waiting)}",
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{labels}}} {kv_usage}",
        "# TYPE vllm:gpu_cache_usage_perc gauge",
        f"vllm:gpu_cache_usage_perc{{{labels}}} {kv_usage}",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f"vllm:prefix_cache_queries_total{{{labels}}} {float(cache_queries)}",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f"vllm:prefix_cache_hits_total{{{labels}}} {float(cache_hits)}",
        "# TYPE vllm:num_preemptions_total counter",
        f"vllm:num_preemptions_total{{{labels}}} 0.0",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{{{labels}}} {float(prompt_tokens)}",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{{{labels}}} {float(generation_tokens)}",
        "# TYPE vllm:request_success_total counter",
    ]
    for reason in ("stop", "length", "abort"):
        count = float(counters.finished.get(reason, 0))
        lines.append(f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} {count}')
    lines += counters.ttft.lines("vllm:time_to_first_token_seconds", labels)
    lines += counters.e2e.lines("vllm:e2e_request_latency_seconds", labels)
    lines += counters.queue.lines("vllm:request_queue_time_seconds", labels)
    lines += counters.prefill.lines("vllm:request_prefill_time_seconds", labels)
    lines += counters.decode.lines("vllm:request_decode_time_seconds", labels)
    if counters.spec is not None:
        lines += counters.spec.lines(labels)
    return lines
