"""The simulator's /metrics under vLLM's names, read with the Prometheus parser."""

from __future__ import annotations

import asyncio
import http.client
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import StartSimulator
from tests.integration.simulator.helpers import chat, request, words


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _one(samples: dict, name: str, **labels: str) -> float:
    want = {"model_name": "veeksha-sim", "engine": "0", **labels}
    return samples[(name, tuple(sorted(want.items())))]


def test_vllm_series_follow_the_engine_queue_and_count_every_request(
    start_simulator: StartSimulator,
) -> None:
    sim = start_simulator(max_num_seqs=2, itl_ms=20, prefix_cache_tokens=4096)

    async def run() -> tuple[str, str, list[dict[str, Any]]]:
        async with asyncio.timeout(10), aiohttp.ClientSession() as session:
            body = chat(words(64, "vllm-metrics"), max_tokens=5, stream=False, ignore_eos=True)
            url = f"{sim.base_url}/chat/completions"

            async def one() -> dict[str, Any]:
                async with session.post(url, json=body) as resp:
                    return dict(await resp.json())

            tasks = [asyncio.create_task(one()) for _ in range(5)]
            await asyncio.sleep(0.03)
            async with session.get(f"{sim.root_url}/metrics") as resp:
                during = await resp.text()
            answers = list(await asyncio.gather(*tasks))
            async with session.get(f"{sim.root_url}/metrics") as resp:
                after = await resp.text()
            return during, after, answers

    during_text, after_text, answers = asyncio.run(run())
    during, after = _samples(during_text), _samples(after_text)
    assert _one(during, "vllm:num_requests_running") == 2
    assert _one(during, "vllm:num_requests_waiting") == 3
    assert 0 < _one(during, "vllm:kv_cache_usage_perc") <= 1
    assert _one(during, "vllm:gpu_cache_usage_perc") == _one(during, "vllm:kv_cache_usage_perc")
    assert _one(after, "vllm:num_requests_running") == 0
    assert _one(after, "vllm:num_requests_waiting") == 0
    assert _one(after, "vllm:kv_cache_usage_perc") == 0
    assert _one(after, "vllm:request_success_total", finished_reason="length") == 5
    assert _one(after, "vllm:request_success_total", finished_reason="stop") == 0
    assert _one(after, "vllm:generation_tokens_total") == 25
    assert _one(after, "vllm:time_to_first_token_seconds_count") == 5
    assert _one(after, "vllm:time_to_first_token_seconds_bucket", le="+Inf") == 5
    assert _one(after, "vllm:e2e_request_latency_seconds_count") == 5
    # the buckets hold each request's TTFT as the server timed it (arrival to first token):
    # those that queued behind whole answers (5 tokens × 20 ms) are above 0.08 s, however late
    # a loaded machine delivered them
    ttfts = [(a["timings"]["first_token_ns"] - a["timings"]["arrival_ns"]) / 1e9 for a in answers]
    assert sum(t > 0.08 for t in ttfts) >= 1
    assert _one(after, "vllm:time_to_first_token_seconds_bucket", le="0.08") == sum(
        t <= 0.08 for t in ttfts
    )
    queries = _one(after, "vllm:prefix_cache_queries_total")
    assert queries > 0
    assert 0 < _one(after, "vllm:prefix_cache_hits_total") < queries  # one prompt: later ones hit
    assert _one(after, "vllm:num_preemptions_total") == 0


def test_a_disconnect_the_server_injects_is_an_abort(start_simulator: StartSimulator) -> None:
    """vLLM counts a request it aborted as ``finished_reason="abort"``, as it does one the client
    left: so do the simulator's injected disconnects, wherever they strike (mid-stream, at the
    end of a stream shorter than ``after_tokens``, in a body), and its tokens count once."""
    sim = start_simulator(faults={"disconnect_rate": 1.0, "after_tokens": 2}, itl_ms=5)
    url = f"{sim.base_url}/chat/completions"

    def cut(body: dict[str, Any]) -> None:
        with pytest.raises((http.client.IncompleteRead, ConnectionError)):
            request(url, body)

    def metrics() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return _samples(request(f"{sim.root_url}/metrics", method="GET").body.decode())

    cut(chat(max_tokens=5, stream=False, ignore_eos=True))  # half a body, then the close
    cut(chat(max_tokens=1, ignore_eos=True))  # the stream ends before its 2nd chunk: struck there
    ended = metrics()
    assert _one(ended, "vllm:request_success_total", finished_reason="abort") == 2
    assert _one(ended, "vllm:generation_tokens_total") == 5 + 1  # (each counted once)
    cut(chat(max_tokens=50, ignore_eos=True))  # after 2 content chunks
    after = metrics()
    assert _one(after, "vllm:request_success_total", finished_reason="abort") == 3
    for reason in ("stop", "length"):
        assert _one(after, "vllm:request_success_total", finished_reason=reason) == 0
    assert _one(after, "vllm:num_requests_running") == 0  # (their slots freed)
