"""``POST /v1/embeddings`` (``veeksha.simulator.embeddings``): the engine's prefill-only
sequences, the vectors, and the endpoint over real HTTP on a loopback port (usage, errors,
metrics, timing, served models, faults)."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import socket
import time
from typing import Any

import aiohttp
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import StartSimulator
from tests.integration.simulator.helpers import MODEL, chat, request, words
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.scenario.loader import load_scenario_text, scenario_hash
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.simulator.embeddings import embedding_vector
from veeksha.simulator.engine import BatchEngine, EngineParams, PrefixCache, SeqState
from veeksha.simulator.process import SimulatorProcess
from veeksha.simulator.settings import SimSettings
from veeksha.simulator.subword import subword_tokenizer

MS = 1_000_000


def embed(sim: SimulatorProcess, body: dict[str, Any]) -> dict[str, Any]:
    reply = request(f"{sim.base_url}/embeddings", body)
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"] == "application/json"
    return dict(reply.json())


def vectors(answer: dict[str, Any]) -> list[np.ndarray]:
    """The answer's vectors as float32 arrays, in ``index`` order (either encoding)."""
    out = []
    for i, item in enumerate(answer["data"]):
        assert (item["object"], item["index"]) == ("embedding", i)
        value = item["embedding"]
        if isinstance(value, str):
            out.append(np.frombuffer(base64.b64decode(value), dtype="<f4"))
        else:
            out.append(np.array(value, dtype=np.float32))
    return out


def samples(sim: SimulatorProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = request(f"{sim.root_url}/metrics", method="GET").body.decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def vllm(found: dict, name: str, model: str = MODEL, **labels: str) -> float:
    want = {"model_name": model, "engine": "0", **labels}
    return float(found[(name, tuple(sorted(want.items())))])


def own(found: dict, name: str, model: str = MODEL, **labels: str) -> float:
    want = {"model_name": model, "process": "0", **labels}
    return float(found[(name, tuple(sorted(want.items())))])


# ---------------------------------------------------------------------------------- the engine


def test_a_prefill_only_sequence_is_done_with_the_step_that_prefills_it() -> None:
    params = EngineParams(
        max_num_seqs=2, prefill_tokens_per_s=1000, decode_step_ms=5, decode_step_ms_per_seq=1
    )
    cache = PrefixCache(capacity_tokens=1000, block_size=16)
    engine = BatchEngine(params, cache)
    generation = SeqState(100, 2, [], 0)
    pooled = SeqState(200, 0, [], 0, uses_prefix_cache=False)
    engine.submit(generation)
    engine.submit(pooled)
    step = engine.begin_step(0)
    assert step is not None
    assert step.prefill == [generation, pooled]
    # both prompts prefilled, only the generation decodes: 5 + 1 × 1 + 300 ms
    assert step.end_ns == 306 * MS
    assert engine.end_step(step, step.end_ns) == [generation, pooled]
    assert pooled.finished
    assert pooled.generated == 0
    assert not pooled.running
    assert (generation.generated, generation.finished) == (1, False)
    assert cache.query_tokens == 100  # (the embedding's tokens are in no hit rate)
    step = engine.begin_step(step.end_ns)
    assert step is not None
    assert step.end_ns - step.start_ns == 6 * MS
    assert engine.end_step(step, step.end_ns) == [generation]
    assert engine.idle


def test_prefill_only_sequences_wait_for_a_slot_like_any() -> None:
    engine = BatchEngine(EngineParams(max_num_seqs=1, prefill_tokens_per_s=10_000), None)
    first, second = SeqState(1000, 0, [], 0), SeqState(1000, 0, [], 0)
    engine.submit(first)
    engine.submit(second)
    step = engine.begin_step(0)
    assert step is not None
    assert (step.batch, step.end_ns) == ([first], 100 * MS)
    engine.end_step(step, step.end_ns)
    step = engine.begin_step(step.end_ns)
    assert step is not None
    assert (step.batch, step.end_ns) == ([second], 200 * MS)
    assert second.scheduled_ns == 100 * MS


# ---------------------------------------------------------------------------------- the vectors


def test_a_vector_is_a_unit_float32_vector_fixed_by_its_tokens_and_model() -> None:
    one = np.frombuffer(embedding_vector([5, 6, 7], 64, "m"), dtype="<f4")
    assert one.shape == (64,)
    assert abs(float(np.linalg.norm(one.astype(np.float64))) - 1) < 1e-6
    assert embedding_vector([5, 6, 7], 64, "m") == one.tobytes()
    assert embedding_vector([5, 6, 8], 64, "m") != one.tobytes()
    assert embedding_vector([5, 6, 7], 64, "other") != one.tobytes()
    head = np.frombuffer(embedding_vector([5, 6, 7], 8, "m"), dtype="<f4")
    # a smaller size is the head of the larger vector, renormalised (Matryoshka)
    assert np.allclose(head, one[:8] / np.linalg.norm(one[:8]), atol=1e-6)


# ---------------------------------------------------------------------------------- over HTTP


def test_a_string_a_list_of_strings_and_token_ids_are_counted_as_the_tokenizer_counts(
    fast_simulator: SimulatorProcess,
) -> None:
    tok = BuiltinTokenizer()
    text = words(37, "embed-text")
    answer = embed(fast_simulator, {"model": MODEL, "input": text})
    assert set(answer) == {"id", "object", "created", "model", "data", "usage", "timings"}
    assert (answer["object"], answer["model"]) == ("list", MODEL)
    assert answer["id"].startswith("embd-")
    assert answer["usage"] == {"prompt_tokens": 37, "total_tokens": 37}
    [vector] = vectors(answer)
    assert vector.tobytes() == embedding_vector(tok.encode(text), 64, MODEL)

    texts = [words(n, f"embed-{n}") for n in (3, 11, 1)]
    answer = embed(fast_simulator, {"input": texts, "user": "u", "truncate_prompt_tokens": 5})
    assert answer["usage"]["prompt_tokens"] == sum(tok.count(t) for t in texts) == 15
    assert [v.tobytes() for v in vectors(answer)] == [
        embedding_vector(tok.encode(t), 64, MODEL) for t in texts
    ]

    ids = tok.encode(texts[1])
    answer = embed(fast_simulator, {"input": ids})
    assert answer["usage"]["prompt_tokens"] == 11
    assert vectors(answer)[0].tobytes() == embedding_vector(tok.encode(texts[1]), 64, MODEL)
    answer = embed(fast_simulator, {"input": [ids, [7, 8, 9]]})
    assert answer["usage"] == {"prompt_tokens": 14, "total_tokens": 14}
    assert len(answer["data"]) == 2


@pytest.mark.parametrize("tokenizer", ["subword", "bytes"])
def test_the_usage_is_the_simulators_tokenizer_count(
    start_simulator: StartSimulator, tokenizer: str
) -> None:
    sim = start_simulator(tokenizer=tokenizer)
    text = words(20, "embed-subword")
    counted = request(f"{sim.root_url}/tokenize", {"prompt": text}).json()["count"]
    if tokenizer == "subword":
        assert counted == len(subword_tokenizer().encode(text))
    else:
        assert counted == len(text.encode())
    answer = embed(sim, {"input": [text, text]})
    assert answer["usage"]["prompt_tokens"] == 2 * counted
    completion = request(
        f"{sim.base_url}/completions", {"model": MODEL, "prompt": text, "max_tokens": 1}
    ).json()
    assert completion["usage"]["prompt_tokens"] == counted


def test_vectors_are_deterministic_unit_and_sized_by_dimensions(
    fast_simulator: SimulatorProcess,
) -> None:
    first = vectors(embed(fast_simulator, {"input": ["ba be bi", "bo bu"]}))
    again = vectors(embed(fast_simulator, {"input": ["ba be bi", "bo bu"]}))
    assert [v.tobytes() for v in first] == [v.tobytes() for v in again]
    assert first[0].tobytes() != first[1].tobytes()
    for vector in first:
        assert vector.shape == (64,)
        assert abs(float(np.linalg.norm(vector.astype(np.float64))) - 1) < 1e-5
    [small] = vectors(embed(fast_simulator, {"input": "ba be bi", "dimensions": 5}))
    assert small.shape == (5,)
    assert abs(float(np.linalg.norm(small.astype(np.float64))) - 1) < 1e-5
    [whole] = vectors(embed(fast_simulator, {"input": "ba be bi", "dimensions": 64}))
    assert whole.tobytes() == first[0].tobytes()


def test_base64_is_the_float_vectors_little_endian_float32_bytes(
    fast_simulator: SimulatorProcess,
) -> None:
    body: dict[str, Any] = {"input": ["da de di", "do du"], "dimensions": 12}
    floats = embed(fast_simulator, {**body, "encoding_format": "float"})
    packed = embed(fast_simulator, {**body, "encoding_format": "base64"})
    assert all(isinstance(item["embedding"], str) for item in packed["data"])
    assert all(isinstance(item["embedding"], list) for item in floats["data"])
    assert [v.tobytes() for v in vectors(packed)] == [v.tobytes() for v in vectors(floats)]
    assert packed["usage"] == floats["usage"]
    # each float is a float32 exactly (what the base64 holds), not a rounding of one
    assert all(float(np.float32(x)) == x for x in floats["data"][0]["embedding"])


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"input": []}, "input", "not empty"),
        ({"input": ""}, "input", "no tokens"),
        ({"input": [[1, 2], []]}, "input", "input 1 has no tokens"),
        ({}, "input", "'input' is required"),
        ({"input": 5}, "input", "a list of lists of token ids"),
        ({"input": ["ba", 3]}, "input", "a list of lists of token ids"),
        ({"input": [[1, "x"]]}, "input", "a list of lists of token ids"),
        ({"input": [True, 2]}, "input", "a list of lists of token ids"),
        ({"input": [1.5]}, "input", "a list of lists of token ids"),
        ({"input": {"text": "ba"}}, "input", "a list of lists of token ids"),
        ({"input": "ba", "encoding_format": "bytes"}, "encoding_format", "'float' or 'base64'"),
        ({"input": "ba", "encoding_format": None}, "encoding_format", "'float' or 'base64'"),
        ({"input": "ba", "dimensions": 0}, "dimensions", ">= 1"),
        ({"input": "ba", "dimensions": "8"}, "dimensions", ">= 1"),
        ({"input": "ba", "dimensions": True}, "dimensions", ">= 1"),
        ({"input": "ba", "dimensions": 65}, "dimensions", "have 64"),
        ({"input": "ba", "model": 3}, "model", "must be a string"),
        ({"input": "ba " * 101}, "input", "maximum context length is 100 tokens"),
        ({"input": [[1], list(range(101))]}, "input", "you requested 101 tokens"),
    ],
)
def test_a_bad_request_is_an_openai_400(
    start_simulator: StartSimulator,
    fast_simulator: SimulatorProcess,
    body: dict[str, Any],
    param: str,
    says: str,
) -> None:
    sim = (
        start_simulator(max_model_len=100)
        if "context length" in says or "101" in says
        else fast_simulator
    )
    reply = request(f"{sim.base_url}/embeddings", body)
    assert reply.status == 400, reply.body
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert says in error["message"]
    if "context length" in says or "101" in says:
        assert error["code"] == "context_length_exceeded"


def test_a_broken_body_or_an_unknown_model_is_refused(fast_simulator: SimulatorProcess) -> None:
    assert request(f"{fast_simulator.base_url}/embeddings", b"{not json").status == 400
    assert request(f"{fast_simulator.base_url}/embeddings", b"[1, 2]").status == 400
    reply = request(f"{fast_simulator.base_url}/embeddings", {"input": "ba", "model": "nobody"})
    assert reply.status == 404
    assert reply.json()["error"]["code"] == "model_not_found"
    assert request(f"{fast_simulator.base_url}/embeddings", method="GET").status == 405


def test_metrics_count_embedding_requests_their_tokens_and_answers(
    start_simulator: StartSimulator,
) -> None:
    sim = start_simulator()
    embed(sim, {"input": "ba be bi"})
    embed(sim, {"input": ["ba be", "bi bo bu da"], "encoding_format": "base64"})
    embed(sim, {"input": [[1, 2, 3, 4, 5]]})
    assert request(f"{sim.base_url}/embeddings", {"input": []}).status == 400
    request(f"{sim.base_url}/chat/completions", chat("ba be", max_tokens=2, ignore_eos=True))
    found = samples(sim)
    assert own(found, "veeksha_sim_requests_total", endpoint="embeddings") == 4
    assert own(found, "veeksha_sim_requests_total", endpoint="chat") == 1
    assert own(found, "veeksha_sim_errors_total", status="400") == 1
    assert own(found, "veeksha_sim_prompt_tokens_total") == 3 + 6 + 5 + 2
    assert vllm(found, "vllm:prompt_tokens_total") == 3 + 6 + 5 + 2
    assert vllm(found, "vllm:generation_tokens_total") == 2
    assert vllm(found, "vllm:request_success_total", finished_reason="stop") == 3
    assert vllm(found, "vllm:request_success_total", finished_reason="length") == 1
    assert vllm(found, "vllm:e2e_request_latency_seconds_count") == 4
    assert vllm(found, "vllm:time_to_first_token_seconds_count") == 1  # (the chat's only)
    assert vllm(found, "vllm:prefix_cache_queries_total") == 2  # (the chat's only)
    assert vllm(found, "vllm:num_requests_running") == 0


def test_the_profiler_and_count_header_count_embedding_requests(
    start_simulator: StartSimulator,
) -> None:
    sim = start_simulator(count_header="X-Session-Id")
    assert request(f"{sim.root_url}/start_profile").status == 200
    conn = http.client.HTTPConnection("127.0.0.1", int(sim.root_url.rsplit(":", 1)[1]), timeout=5)
    try:
        for session in ("s1", "s1", "s2"):
            headers = {"content-type": "application/json", "x-session-id": session}
            conn.request("POST", "/v1/embeddings", json.dumps({"input": "ba"}), headers)
            response = conn.getresponse()
            assert response.status == 200
            response.read()
    finally:
        conn.close()
    found = samples(sim)
    assert own(found, "veeksha_sim_profiled_requests_total") == 3
    counted = {"header": "X-Session-Id"}
    assert own(found, "veeksha_sim_header_requests_total", **counted, value="s1") == 2
    assert own(found, "veeksha_sim_header_requests_total", **counted, value="s2") == 1


def test_an_embedding_costs_its_prefill_and_queues_for_a_slot(
    start_simulator: StartSimulator,
) -> None:
    sim = start_simulator(
        timing="engine",
        prefill_tokens_per_s=10_000,
        decode_step_ms=0,
        decode_step_ms_per_seq=0,
        max_num_seqs=1,
    )
    url = f"{sim.base_url}/embeddings"
    body = {"input": words(1000, "embed-timing")}
    began = time.monotonic()
    alone = embed(sim, body)["timings"]
    assert time.monotonic() - began >= 0.095
    assert alone["prompt_tokens"] == 1000
    assert alone["prefill_s"] >= 0.099  # (1,000 tokens at 10,000 a second)
    assert alone["finished_ns"] - alone["arrival_ns"] < 2e9

    async def concurrently(*bodies: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
        async with asyncio.timeout(10), aiohttp.ClientSession() as session:

            async def one(where: str, body: dict[str, Any]) -> dict[str, Any]:
                async with session.post(where, json=body) as resp:
                    assert resp.status == 200
                    return dict(await resp.json())

            return list(await asyncio.gather(*(one(u, b) for u, b in bodies)))

    began = time.monotonic()
    first, second = asyncio.run(concurrently((url, body), (url, body)))
    assert time.monotonic() - began >= 0.19  # one slot: one prefill after the other
    apart = abs(first["timings"]["scheduled_ns"] - second["timings"]["scheduled_ns"])
    assert apart >= 0.099e9
    # an embedding and a generation of 1,000 prompt tokens each: one waits for the other's slot
    chat_url = f"{sim.base_url}/chat/completions"
    generation = chat(words(1000, "embed-chat"), max_tokens=1, stream=False)
    embedding, answer = asyncio.run(concurrently((url, body), (chat_url, generation)))
    apart = abs(embedding["timings"]["scheduled_ns"] - answer["timings"]["scheduled_ns"])
    assert apart >= 0.099e9
    assert embedding["timings"]["prefill_s"] >= 0.099


def test_fixed_timing_answers_ttft_ms_after_the_slot(start_simulator: StartSimulator) -> None:
    sim = start_simulator(ttft_ms=100, itl_ms=50)
    began = time.monotonic()
    timings = embed(sim, {"input": ["ba be", "bi"]})["timings"]
    assert time.monotonic() - began >= 0.095
    assert timings["prefill_s"] >= 0.099  # (when its first token would be: not 50 ms sooner)


def test_the_model_field_chooses_the_served_model(start_simulator: StartSimulator) -> None:
    sim = start_simulator(embedding_dims=16, models={"small": {"embedding_dims": 4}, "same": {}})
    default = embed(sim, {"input": "ba be"})
    assert (default["model"], len(default["data"][0]["embedding"])) == (MODEL, 16)
    assert embed(sim, {"input": "ba be", "model": None})["data"] == default["data"]
    small = embed(sim, {"input": "ba be", "model": "small"})
    assert (small["model"], len(small["data"][0]["embedding"])) == ("small", 4)
    same = embed(sim, {"input": "ba be", "model": "same", "dimensions": 16})
    assert same["model"] == "same"
    assert same["data"][0]["embedding"] != default["data"][0]["embedding"]  # another model
    reply = request(
        f"{sim.base_url}/embeddings", {"input": "ba", "model": "small", "dimensions": 5}
    )
    assert reply.status == 400
    assert request(f"{sim.base_url}/embeddings", {"input": "b", "model": "x"}).status == 404
    found = samples(sim)
    assert own(found, "veeksha_sim_requests_total", "small", endpoint="embeddings") == 2
    assert own(found, "veeksha_sim_requests_total", MODEL, endpoint="embeddings") == 3
    assert vllm(found, "vllm:prompt_tokens_total", "small") == 2
    assert vllm(found, "vllm:request_success_total", "same", finished_reason="stop") == 1


@pytest.mark.parametrize(("kind", "status"), [("http_503", 503), ("http_429", 429)])
def test_an_http_error_fault_answers_an_embedding(
    start_simulator: StartSimulator, kind: str, status: int
) -> None:
    sim = start_simulator(faults={f"{kind}_rate": 1.0, "retry_after_s": 3})
    reply = request(f"{sim.base_url}/embeddings", {"input": "ba be"})
    assert reply.status == status
    assert reply.headers["retry-after"] == "3"
    found = samples(sim)
    assert own(found, "veeksha_sim_faults_total", kind=kind) == 1
    assert vllm(found, "vllm:prompt_tokens_total") == 0


def test_slow_headers_delay_an_embedding_and_stream_faults_pass_it_by(
    start_simulator: StartSimulator,
) -> None:
    sim = start_simulator(faults={"slow_headers_rate": 1.0, "slow_headers_s": 0.3})
    began = time.monotonic()
    answer = embed(sim, {"input": "ba be"})
    assert time.monotonic() - began >= 0.29
    assert answer["timings"]["fault"] == "slow_headers"
    kinds = ("disconnect", "stall", "malformed_sse", "never_ending")
    other = start_simulator(faults={f"{kind}_rate": 0.25 for kind in kinds} | {"stall_s": 5})
    for _ in range(8):
        assert embed(other, {"input": "ba be"})["timings"]["fault"] is None
    assert not [key for key in samples(other) if key[0] == "veeksha_sim_faults_total"]


def test_a_client_that_leaves_is_an_abort_and_frees_the_slot(
    start_simulator: StartSimulator,
) -> None:
    sim = start_simulator(timing="engine", prefill_tokens_per_s=1000, max_num_seqs=1)
    port = int(sim.root_url.rsplit(":", 1)[1])
    body = json.dumps({"input": [list(range(2000)), list(range(2000))]}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%b" % (len(body), body)
        )
        deadline = time.monotonic() + 5
        while vllm(samples(sim), "vllm:num_requests_running") < 1:
            assert time.monotonic() < deadline
    deadline = time.monotonic() + 5
    while vllm(found := samples(sim), "vllm:request_success_total", finished_reason="abort") < 1:
        assert time.monotonic() < deadline
    assert own(found, "veeksha_sim_requests_cancelled_total") == 1
    assert vllm(found, "vllm:request_success_total", finished_reason="stop") == 0
    assert vllm(found, "vllm:num_requests_running") == 0
    assert vllm(found, "vllm:num_requests_waiting") == 0
    # the slot is freed: a short request waits only for the end of the engine step running
    # when the client left (the first input's 2-s prefill, begun before), not for the second
    # input's 2 s more (the server's own account of its queue wait, not the client's clock)
    assert embed(sim, {"input": "ba"})["timings"]["queue_wait_s"] < 2.0


# ---------------------------------------------------------------------------------- the setting


def test_embedding_dims_is_a_setting_per_model_and_hashes_only_when_set() -> None:
    config = SimulatorConfig.model_validate(
        {"embedding_dims": 128, "models": {"other": {"embedding_dims": 8}, "same": {}}}
    )
    settings = SimSettings.from_json(config.model_dump_json())
    assert settings.embedding_dims == 128
    assert settings.for_model("other").embedding_dims == 8
    assert settings.for_model("same").embedding_dims == 128
    assert SimulatorConfig().embedding_dims == 64
    for wrong in (0, 8193):
        with pytest.raises(ValueError, match="embedding_dims"):
            SimulatorConfig(embedding_dims=wrong)

    def hash_of(text: str) -> str:
        return scenario_hash(load_scenario_text(text, "s.yaml"))

    assert hash_of("seed: 42") == "41a55509ee"  # (from before the key existed)
    assert hash_of("seed: 42\nsimulator: {embedding_dims: 64}") == "41a55509ee"
    assert hash_of("seed: 42\nsimulator: {embedding_dims: 32}") != "41a55509ee"
    assert hash_of("seed: 42\nsimulator: {models: {b: {embedding_dims: 8}}}") != hash_of(
        "seed: 42\nsimulator: {models: {b: {}}}"
    )
