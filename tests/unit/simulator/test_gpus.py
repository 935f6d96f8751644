"""Simulated GPUs (``veeksha.simulator.gpus``, ``GET /dcgm/metrics``): the busy clock the slot
queues share, the dcgm-exporter exposition and its power model, and the endpoint over real
HTTP on a loopback port (idle, then busy; every served model; both timings; headers)."""

from __future__ import annotations

import http.client
import re
import time
import urllib.parse
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import StartSimulator
from tests.integration.simulator.helpers import MODEL, chat, request
from veeksha.errors import ScenarioError
from veeksha.scenario.loader import load_scenario_text, scenario_hash
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.simulator.engine import BatchEngine, EngineParams, SeqState, SlotQueue
from veeksha.simulator.gpus import (
    FB_TOTAL_MIB,
    HOSTNAME,
    MODEL_NAME,
    BusyClock,
    SimulatedGpus,
    gpu_uuid,
)
from veeksha.simulator.process import SimulatorProcess
from veeksha.simulator.settings import SimSettings

MS = 1_000_000
S = 1_000_000_000
FAMILIES = {
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
}
UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def seq(arrival_ns: int = 0) -> SeqState:
    return SeqState(prompt_tokens=4, target_tokens=2, prompt_hashes=[], arrival_ns=arrival_ns)


def gpu_values(text: str) -> dict[str, dict[str, float]]:
    """Family → GPU index → value (checking that every GPU of a family has one sample)."""
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            gpus = out.setdefault(family.name, {})
            assert sample.labels["gpu"] not in gpus
            gpus[sample.labels["gpu"]] = float(sample.value)
    return out


def one_value(text: str, family: str) -> float:
    """A family's value, the same on every GPU."""
    values = set(gpu_values(text)[family].values())
    assert len(values) == 1, values
    return values.pop()


# ---------------------------------------------------------------------------- the busy clock


def test_the_busy_clock_counts_while_any_sequence_of_any_queue_runs() -> None:
    busy = BusyClock()
    a = SlotQueue(max_num_seqs=1, cache=None, busy=busy)
    b = SlotQueue(max_num_seqs=2, cache=None, busy=busy)
    first, waiting, other, third = seq(), seq(), seq(), seq()
    assert busy.busy_ns(100 * MS) == 0  # idle so far
    a.submit(first)
    a.submit(waiting)  # (no slot: waiting is not running, so not busy)
    assert a.admit(now_ns=100 * MS) == [first]
    assert busy.running == 1
    assert busy.busy_ns(130 * MS) == 30 * MS  # the open interval
    b.submit(other)
    b.submit(third)
    assert b.admit(now_ns=120 * MS) == [other, third]  # overlapping, in another queue
    assert busy.running == 3
    a.release(first, now_ns=150 * MS)
    assert a.admit(now_ns=150 * MS) == [waiting]
    b.release(other, now_ns=160 * MS)
    a.release(waiting, now_ns=180 * MS)
    assert busy.busy_ns(190 * MS) == 90 * MS  # third still runs
    b.release(third, now_ns=200 * MS)
    assert busy.running == 0
    assert busy.busy_ns(200 * MS) == busy.busy_ns(500 * MS) == 100 * MS  # idle: no more
    a.release(first, now_ns=600 * MS)  # (released twice: nothing)
    assert busy.running == 0
    a.submit(fresh := seq())
    a.admit(now_ns=700 * MS)
    a.release(fresh, now_ns=750 * MS)
    assert busy.busy_ns(800 * MS) == 150 * MS  # 100-200 and 700-750


def test_the_busy_clock_never_counts_an_instant_twice_nor_backwards() -> None:
    busy = BusyClock()
    busy.started(1, now_ns=100)
    busy.stopped(now_ns=200)
    busy.started(1, now_ns=150)  # (an engine step's model time, before the last release)
    assert busy.busy_ns(180) == 100  # the new interval begins at 200
    busy.stopped(now_ns=250)
    assert busy.busy_ns(1000) == 150
    busy.started(2, now_ns=2000)
    assert busy.busy_ns(1500) == 150  # a reading before the interval began
    readings = [busy.busy_ns(t) for t in range(1500, 2500, 50)]
    assert readings == sorted(readings)


def test_a_queue_without_a_busy_clock_counts_nothing() -> None:
    slots = SlotQueue(max_num_seqs=1, cache=None)
    slots.submit(s := seq())
    slots.admit(now_ns=0)
    slots.release(s)
    assert slots.busy is None


def test_an_engine_is_busy_from_its_first_step_to_the_release_of_its_last_sequence() -> None:
    busy = BusyClock()
    engine = BatchEngine(EngineParams(max_num_seqs=2, decode_step_ms=10), cache=None)
    engine.slots.busy = busy
    engine.submit(s := seq(arrival_ns=5 * MS))
    step = engine.begin_step(5 * MS)
    assert step is not None
    engine.end_step(step, now_ns=16 * MS)  # a timer 1 ms late: the slot is held until then
    step = engine.begin_step(step.end_ns)
    assert step is not None
    assert engine.end_step(step, now_ns=26 * MS) == [s]
    assert busy.running == 0
    assert busy.busy_ns(40 * MS) == 21 * MS
    engine.submit(gone := seq(arrival_ns=50 * MS))
    engine.begin_step(50 * MS)
    engine.abort(gone, now_ns=53 * MS)
    assert busy.busy_ns(60 * MS) == 24 * MS


# ---------------------------------------------------------------------------- the exposition


def test_the_exposition_is_dcgm_exporters_with_every_field_for_every_gpu() -> None:
    gpus = SimulatedGpus(3, 80.0, 700.0, seed=7, t0_ns=0, busy=BusyClock())
    text = gpus.exposition(now_ns=2 * S)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    # (prometheus_client names a counter's family without _total, its samples with it)
    assert {name: f.type for name, f in families.items()} == FAMILIES
    uuids = [gpu_uuid(7, i) for i in range(3)]
    assert all(UUID.fullmatch(uuid) for uuid in uuids)
    assert len(set(uuids)) == 3
    assert uuids == [gpu_uuid(7, i) for i in range(3)]  # deterministic
    assert gpu_uuid(8, 0) not in uuids  # another seed, other GPUs
    for name, family in families.items():
        assert family.documentation, name
        assert [s.labels for s in family.samples] == [
            {
                "gpu": str(i),
                "UUID": uuids[i],
                "device": f"nvidia{i}",
                "modelName": MODEL_NAME,
                "Hostname": HOSTNAME,
            }
            for i in range(3)
        ]
    # the labels in dcgm-exporter's order, HELP and TYPE before each family's samples
    assert (
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="{uuids[1]}",device="nvidia1",'
        f'modelName="{MODEL_NAME}",Hostname="{HOSTNAME}"}} 0\n'
    ) in text
    for name, kind in FAMILIES.items():
        assert f"# TYPE {name} {kind}\n" in text
        assert (
            text.index(f"# HELP {name} ") < text.index(f"# TYPE {name} ") < text.index(name + "{")
        )
    assert text.endswith("\n")
    values = gpu_values(text)
    assert one_value(text, "DCGM_FI_DEV_FB_USED") == round(0.9 * FB_TOTAL_MIB) == 73403
    assert one_value(text, "DCGM_FI_DEV_FB_FREE") == FB_TOTAL_MIB - 73403
    assert one_value(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == 160_000  # 80 W × 2 s
    assert len(values) == len(FAMILIES)
    # the same text parses again, a second later
    assert gpu_values(gpus.exposition(now_ns=3 * S))["DCGM_FI_DEV_POWER_USAGE"] == {
        "0": 80.0,
        "1": 80.0,
        "2": 80.0,
    }


def test_util_and_power_average_over_the_period_since_the_previous_answer() -> None:
    busy = BusyClock()
    gpus = SimulatedGpus(2, 100.0, 500.0, seed=0, t0_ns=10 * S, busy=busy)

    def answer(now_ns: int) -> dict[str, float]:
        text = gpus.exposition(now_ns=now_ns)
        return {name: one_value(text, name) for name in FAMILIES}

    idle = answer(12 * S)  # the first period: since the start
    assert idle["DCGM_FI_DEV_GPU_UTIL"] == 0
    assert idle["DCGM_FI_DEV_POWER_USAGE"] == 100.0
    assert idle["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 200_000  # 100 W × 2 s
    assert idle["DCGM_FI_DEV_GPU_TEMP"] == 30
    assert idle["DCGM_FI_DEV_SM_CLOCK"] == 345
    busy.started(1, now_ns=13 * S)
    half = answer(14 * S)  # busy half of 12 → 14 s
    assert half["DCGM_FI_DEV_GPU_UTIL"] == 50
    assert half["DCGM_FI_DEV_POWER_USAGE"] == 300.0  # (100 W × 2 s + 400 W × 1 s, over 2 s)
    assert half["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 100 * 4_000 + 400 * 1_000
    assert half["DCGM_FI_DEV_GPU_TEMP"] == round(30 + 45 * 0.5)
    assert half["DCGM_FI_DEV_SM_CLOCK"] == 1980
    busy.stopped(now_ns=14 * S + S // 4)
    full = answer(14 * S + S // 4)  # busy the whole 250 ms since the previous answer
    assert full["DCGM_FI_DEV_GPU_UTIL"] == 100
    assert full["DCGM_FI_DEV_POWER_USAGE"] == 500.0
    assert full["DCGM_FI_DEV_GPU_TEMP"] == 75
    assert full["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 800_000 + 125_000
    third = answer(14 * S + S // 4 + 3 * S)  # busy 0 of 3 s
    assert third["DCGM_FI_DEV_GPU_UTIL"] == 0
    assert third["DCGM_FI_DEV_POWER_USAGE"] == 100.0
    assert third["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 925_000 + 300_000
    # a power of 3 decimals: 1 ms busy in 3 s
    busy.started(1, now_ns=20 * S)
    busy.stopped(now_ns=20 * S + MS)
    text = gpus.exposition(now_ns=20 * S + 250 * MS)
    assert re.search(r"DCGM_FI_DEV_POWER_USAGE\{[^}]*\} (\d+\.\d{3})\n", text)
    expected = 100 + 400 * MS / (20 * S + 250 * MS - (17 * S + S // 4))
    assert one_value(text, "DCGM_FI_DEV_POWER_USAGE") == pytest.approx(expected, abs=5e-4)
    assert one_value(text, "DCGM_FI_DEV_GPU_UTIL") == 0  # (0.03 %: rounded)
    assert one_value(text, "DCGM_FI_DEV_SM_CLOCK") == 345


# ---------------------------------------------------------------------------------- the settings


def test_gpu_settings_are_server_wide_and_hash_only_when_set() -> None:
    config = SimulatorConfig.model_validate(
        {"gpus": 4, "gpu_idle_watts": 60, "gpu_busy_watts": 400, "models": {"other": {}}}
    )
    settings = SimSettings.from_json(config.model_dump_json())
    assert (settings.gpus, settings.gpu_idle_watts, settings.gpu_busy_watts) == (4, 60.0, 400.0)
    other = settings.for_model("other")
    assert (other.gpus, other.gpu_idle_watts, other.gpu_busy_watts) == (4, 60.0, 400.0)
    default = SimulatorConfig()
    assert (default.gpus, default.gpu_idle_watts, default.gpu_busy_watts) == (0, 80.0, 700.0)
    with pytest.raises(ValueError, match="gpus"):
        SimulatorConfig.model_validate({"models": {"other": {"gpus": 2}}})  # (not per model)

    def hash_of(text: str) -> str:
        return scenario_hash(load_scenario_text(text, "s.yaml"))

    assert hash_of("seed: 42") == "41a55509ee"  # (from before the keys existed)
    defaults = "{gpus: 0, gpu_idle_watts: 80, gpu_busy_watts: 700}"
    assert hash_of(f"seed: 42\nsimulator: {defaults}") == "41a55509ee"
    for changed in ("{gpus: 8}", "{gpu_idle_watts: 50}", "{gpu_busy_watts: 400}"):
        assert hash_of(f"seed: 42\nsimulator: {changed}") != "41a55509ee", changed


@pytest.mark.parametrize(
    "settings",
    [
        {"gpus": -1},
        {"gpu_idle_watts": -1},
        {"gpu_busy_watts": 0},
        {"gpu_idle_watts": 300, "gpu_busy_watts": 200},
    ],
)
def test_invalid_gpu_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(settings))):
        SimulatorConfig.model_validate(settings)


def test_busy_watts_below_idle_watts_is_refused_naming_both_keys() -> None:
    with pytest.raises(ValueError, match=r"gpu_busy_watts: must be at least gpu_idle_watts"):
        SimulatorConfig(gpu_idle_watts=300, gpu_busy_watts=200)
    with pytest.raises(ScenarioError, match=r"simulator\.gpu_busy_watts: .*gpu_idle_watts"):
        load_scenario_text("simulator: {gpu_idle_watts: 300, gpu_busy_watts: 200}", "s.yaml")
    assert SimulatorConfig(gpu_idle_watts=300, gpu_busy_watts=300).gpu_busy_watts == 300


# ------------------------------------------------------------------------ over HTTP, for real


def scrape(sim: SimulatorProcess) -> tuple[str, int, int]:
    """``/dcgm/metrics``' text, and the client's clock just before and after it."""
    before = time.monotonic_ns()
    reply = request(f"{sim.root_url}/dcgm/metrics", method="GET")
    after = time.monotonic_ns()
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"].startswith("text/plain")
    return reply.body.decode(), before, after


def busy_requests(sim: SimulatorProcess, seconds: float, models: list[str]) -> int:
    """Non-streaming requests back to back for ``seconds``, cycling over ``models``: the sum
    of the time each held its slot, ns (scheduled → its last token: its release)."""
    total = 0
    began = time.monotonic()
    i = 0
    while time.monotonic() - began < seconds:
        body = chat(max_tokens=10, stream=False, model=models[i % len(models)])
        reply = request(f"{sim.base_url}/chat/completions", body)
        assert reply.status == 200, reply.body
        timings = reply.json()["timings"]
        total += timings["last_token_ns"] - timings["scheduled_ns"]
        i += 1
    return total


def check_energy(
    first: tuple[str, int, int],
    second: tuple[str, int, int],
    busy_ns: int,
    idle: float,
    busy: float,
) -> None:
    """The energy counter grew by the power model's integral between the two answers, and the
    second's power and utilisation are its averages: exactly, within the scrapes' own time."""
    (text1, before1, after1), (text2, before2, after2) = first, second
    grew = gpu_values(text2)["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    for gpu, value in gpu_values(text1)["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].items():
        grew[gpu] -= value
    shortest, longest = before2 - after1, after2 - before1  # (the server's period: between)
    work = (busy - idle) * busy_ns / 1e6  # mJ above idle
    for gpu, delta in grew.items():
        assert idle * shortest / 1e6 + work - 1 <= delta <= idle * longest / 1e6 + work + 1, gpu
    power = one_value(text2, "DCGM_FI_DEV_POWER_USAGE")
    assert idle + (busy - idle) * busy_ns / longest - 5e-4 <= power
    assert power <= idle + (busy - idle) * busy_ns / shortest + 5e-4
    util = one_value(text2, "DCGM_FI_DEV_GPU_UTIL")
    assert round(100 * busy_ns / longest) <= util <= min(round(100 * busy_ns / shortest), 100)


def test_dcgm_metrics_are_idle_then_busy_and_the_energy_is_the_power_models_integral(
    start_simulator: StartSimulator,
) -> None:
    # 100 ms to the first token, then 9 × 10 ms: 190 ms a request; a second model in engine
    # timing (10 steps of 20 ms), sharing the process' GPUs
    sim = start_simulator(
        gpus=2,
        timing="fixed",
        ttft_ms=100,
        itl_ms=10,
        gpu_idle_watts=80,
        gpu_busy_watts=700,
        models={"batched": {"timing": "engine", "decode_step_ms": 20, "prefill_tokens_per_s": 0}},
    )
    time.sleep(0.2)
    first = scrape(sim)  # idle since the start
    time.sleep(0.3)
    idle = scrape(sim)  # idle since the first answer
    for text, _, _ in (first, idle):
        assert one_value(text, "DCGM_FI_DEV_GPU_UTIL") == 0
        assert one_value(text, "DCGM_FI_DEV_POWER_USAGE") == 80.0
        assert one_value(text, "DCGM_FI_DEV_SM_CLOCK") == 345
        assert one_value(text, "DCGM_FI_DEV_GPU_TEMP") == 30
        assert set(gpu_values(text)["DCGM_FI_DEV_GPU_UTIL"]) == {"0", "1"}
    check_energy(first, idle, 0, 80.0, 700.0)

    busy_ns = busy_requests(sim, 1.0, [MODEL, "batched"])
    loaded = scrape(sim)
    check_energy(idle, loaded, busy_ns, 80.0, 700.0)
    # (back to back: ~99 % on a quiet machine, 89 % seen on a loaded one; check_energy holds
    # the exact numbers to the busy time the answers report)
    assert one_value(loaded[0], "DCGM_FI_DEV_GPU_UTIL") >= 50
    assert one_value(loaded[0], "DCGM_FI_DEV_POWER_USAGE") >= 80 + 0.5 * 620
    assert one_value(loaded[0], "DCGM_FI_DEV_SM_CLOCK") == 1980
    assert one_value(loaded[0], "DCGM_FI_DEV_GPU_TEMP") >= 30 + 0.5 * 45

    time.sleep(0.2)
    after = scrape(sim)  # idle again
    check_energy(loaded, after, 0, 80.0, 700.0)
    assert one_value(after[0], "DCGM_FI_DEV_GPU_UTIL") == 0
    energies = [
        one_value(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        for text, _, _ in (first, idle, loaded, after)
    ]
    assert energies == sorted(energies)
    assert len(set(energies)) == 4
    # (the UUIDs: from the seed)
    family = next(
        f for f in text_string_to_metric_families(after[0]) if f.name == "DCGM_FI_DEV_GPU_UTIL"
    )
    assert [s.labels["UUID"] for s in family.samples] == [gpu_uuid(0, 0), gpu_uuid(0, 1)]


def test_without_gpus_dcgm_metrics_is_an_unknown_path(fast_simulator: SimulatorProcess) -> None:
    reply = request(f"{fast_simulator.root_url}/dcgm/metrics", method="GET")
    assert reply.status == 404
    assert "no route /dcgm/metrics" in reply.json()["error"]["message"]
    assert request(f"{fast_simulator.root_url}/dcgm/metrics", method="POST").status == 404


def test_dcgm_metrics_is_no_model_request_and_needs_no_gateway_header(
    start_simulator: StartSimulator,
) -> None:
    sim = start_simulator(gpus=1, required_headers={"X-Api-Key": "k"}, count_header="X-Session-Id")
    key = {"X-Api-Key": "k"}
    assert headed(sim, "POST", "/start_profile", key)[0] == 200
    status, body = headed(sim, "GET", "/dcgm/metrics", {"X-Session-Id": "s1"})  # (no key)
    assert status == 200
    assert "DCGM_FI_DEV_POWER_USAGE{" in body
    assert headed(sim, "POST", "/dcgm/metrics", {})[0] == 405
    assert headed(sim, "GET", "/metrics", {})[0] == 401  # (the server's own still needs it)
    status, text = headed(sim, "GET", "/metrics", key)
    assert status == 200
    assert "veeksha_sim_requests_total{" not in text
    assert "veeksha_sim_header_requests_total" not in text
    assert f'veeksha_sim_profiled_requests_total{{model_name="{MODEL}",process="0"}} 0' in text
    assert 'veeksha_sim_errors_total{model_name="veeksha-sim",process="0",status="405"}' in text


def headed(
    sim: SimulatorProcess, method: str, path: str, headers: dict[str, str]
) -> tuple[int, str]:
    """One request with ``headers`` on a fresh connection: its status and body."""
    parts = urllib.parse.urlsplit(sim.root_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, path, body=b"" if method == "POST" else None, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()
