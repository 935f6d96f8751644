"""Capacity search end to end against the built-in simulator, with a capacity known exactly.

The truth: a simulator with fixed timing (first token ``ttft_ms`` after a request is scheduled,
then one every ``itl_ms``) and ``max_num_seqs`` running slots, driven by a closed loop of C
single-request sessions. While C ≤ max_num_seqs every request is scheduled at once and its TTFC
is ttft_ms (40 ms) plus the loopback; with C > max_num_seqs, C − max_num_seqs requests are always
waiting for a slot, a whole service time (ttft_ms + 4 × itl_ms = 80 ms) each: at C = 4 over 3
slots a quarter of the requests see ≈ 120 ms. A p90 TTFC SLO of 70 ms therefore holds exactly
up to C = max_num_seqs, which the search must find at precision 0 (integers): the simulator's own
max_num_seqs, read from capacity.json's server description, is the truth.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner

from veeksha import cli

SEARCH = """\
output_dir: {out}
start_value: 2
max_value: 16
expansion_factor: 2
max_iterations: 6
precision: 0
warmup_seconds: 0.3
benchmark_config:
  seed: 7
  traffic_scheduler: {{type: concurrent, rampup_seconds: 0}}
  session_generator:
    type: synthetic
    session_graph: {{type: single_request}}
    channels: [{{type: text, body_length_generator: {{type: fixed, value: 16}}}}]
    output_spec: {{text: {{output_length_generator: {{type: fixed, value: 5}}}}}}
  runtime: {{max_sessions: 60, benchmark_timeout: 60, num_workers: 1}}
  simulator: {{timing: fixed, ttft_ms: 40, itl_ms: 10, max_num_seqs: 3}}
  # a closed loop on a shared 2-core machine: the generator's lag is not the measurement here
  # (a TTFC runs from the request's send). At 50 ms both runs of the first probe were
  # unhealthy in a suite on a saturated machine (p99 120 and 150 ms of 60 requests: the main
  # process waited for a CPU 7-17% of the time), and the search ended without a verdict; a lag
  # that thinned C = 4's queue would show in its verdict, which the test holds
  health_checks: {{max_dispatch_lag_p99_ms: 200}}
  evaluators:
    - type: performance
      stream_metrics: false
      slos: [{{name: p90 TTFC, metric: ttfc, percentile: 0.9, value: 0.07}}]
"""


def test_the_search_finds_the_simulators_batch_limit(tmp_path: Path) -> None:
    path = tmp_path / "search.yaml"
    path.write_text(textwrap.dedent(SEARCH.format(out=tmp_path / "out")), encoding="utf-8")
    result = CliRunner().invoke(
        cli.main, ["capacity-search", "--config", str(path), "--no-plots"], prog_name="veeksha"
    )
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "out").iterdir()
    assert folder.name.startswith("capacity-")
    document = json.loads((folder / "capacity.json").read_text())

    truth = document["server"]["max_num_seqs"]  # the simulator's own setting, as it reported it
    assert truth == 3
    assert document["resolution"] == 1
    assert document["best_value"] == truth  # within precision 0 of the truth: exactly it
    assert document["ceiling"] == {"value": truth + 1, "verdict": "fail"}
    assert document["converged"]
    history = document["history"]
    assert [(h["value"], h["phase"]) for h in history] == [
        (2, "probe"),
        (4, "probe"),
        (3, "bisect"),
    ]
    for entry in history:
        (slo,) = entry["slo_results"]
        assert slo["samples"] >= 60
        if entry["value"] <= truth:
            assert entry["verdict"] == "pass"
            assert slo["ci_high"] <= 0.07
            assert slo["estimate"] >= 0.04  # never below the server's own TTFT
        else:
            assert entry["verdict"] == "fail"
            assert slo["ci_low"] > 0.07
            assert slo["estimate"] > 0.07
        assert entry["runs"][-1]["healthy"]  # (an unhealthy run would have been retried)
        assert (folder / entry["run_dir"] / "requests.parquet").is_file()

    # one simulator served every probe: each run's client pointed at the same base URL
    bases = {
        (folder / h["run_dir"] / "config.yaml").read_text().split("api_base: ")[1].split()[0]
        for h in history
    }
    assert bases == {document["server"]["base_url"]}
    assert (folder / "best").resolve() == (folder / document["best_run_dir"]).resolve()
    assert (folder / "capacity.png").stat().st_size > 0
    assert "capacity: 3 sessions" in result.output
    # each probe: a line of its own, its SLO's interval on the next, all within 80 columns
    # (but the folder's path, which cannot wrap)
    lines = result.output.splitlines()
    assert [line for line in lines if len(line) > 80 and str(tmp_path) not in line] == []
    (probe,) = [i for i, line in enumerate(lines) if line.startswith("probe 2: ")]
    # (its runs as capacity.json counts them: on a loaded machine an unhealthy run is retried,
    # "(2 runs)")
    runs = len(history[1]["runs"])
    assert lines[probe].endswith(f"=4 FAIL ({runs} run{'s' if runs > 1 else ''})")
    assert lines[probe + 1].startswith("  p90 TTFC: ")


UNHEALTHY = """\
output_dir: {out}
start_value: 2
max_value: 8
precision: 0
warmup_seconds: 0
benchmark_config:
  traffic_scheduler: {{type: concurrent, rampup_seconds: 0}}
  session_generator:
    type: synthetic
    session_graph: {{type: single_request}}
    channels: [{{type: text, body_length_generator: {{type: fixed, value: 8}}}}]
    output_spec: {{text: {{output_length_generator: {{type: fixed, value: 2}}}}}}
  runtime: {{max_sessions: 4, benchmark_timeout: 30, num_workers: 1}}
  # no generator is that fast: every run fails generator_saturation
  health_checks: {{max_dispatch_lag_p99_ms: 0.000001}}
  evaluators: [{{slos: [{{name: p50 TTFC, metric: ttfc, percentile: 0.5, value: 10}}]}}]
"""


def test_an_unhealthy_probe_is_retried_once_and_never_judged(tmp_path: Path) -> None:
    path = tmp_path / "search.yaml"
    path.write_text(textwrap.dedent(UNHEALTHY.format(out=tmp_path / "out")), encoding="utf-8")
    result = CliRunner().invoke(
        cli.main, ["capacity-search", str(path), "--no-plots"], prog_name="veeksha"
    )
    assert result.exit_code == 4, result.output
    (folder,) = (tmp_path / "out").iterdir()
    document = json.loads((folder / "capacity.json").read_text())
    (entry,) = document["history"]
    assert (entry["value"], entry["verdict"], entry["all_slos_met"]) == (2, "unhealthy", None)
    assert entry["slo_results"] == []
    assert [(r["retry"], r["healthy"]) for r in entry["runs"]] == [(False, False), (True, False)]
    assert "generator_saturation" in entry["runs"][0]["health"]
    assert document["unhealthy_values"] == [2]
    assert document["best_value"] is None
    assert document["ceiling"] == {"value": 2, "verdict": "unhealthy"}
    assert len(list((folder / "runs").iterdir())) == 2
    assert not (folder / "best").exists()
    assert "the first, 2, was unhealthy" in result.output


RATE = """\
output_dir: {out}
start_value: 12.5
max_value: 12.5
precision: 1
warmup_seconds: 0
benchmark_config: rate.yaml
"""
RATE_SCENARIO = """\
traffic_scheduler: {type: rate, interval_generator: {type: poisson}}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
  channels: [{type: text, body_length_generator: {type: fixed, value: 8}}]
  output_spec: {text: {output_length_generator: {type: fixed, value: 2}}}
runtime: {max_sessions: 12, benchmark_timeout: 30, num_workers: 1}
health_checks: {max_dispatch_lag_p99_ms: 50}
evaluators: [{slos: [{name: p50 E2E, metric: e2e, percentile: 0.5, value: 5}]}]
"""


def test_a_rate_search_sets_the_probes_arrival_rate(tmp_path: Path) -> None:
    (tmp_path / "rate.yaml").write_text(RATE_SCENARIO, encoding="utf-8")
    path = tmp_path / "search.yaml"
    path.write_text(RATE.format(out=tmp_path / "out"), encoding="utf-8")
    result = CliRunner().invoke(
        cli.main, ["capacity-search", str(path), "--no-plots", "-q"], prog_name="veeksha"
    )
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "out").iterdir()
    document = json.loads((folder / "capacity.json").read_text())
    assert document["searched_knob"] == "traffic_scheduler.interval_generator.arrival_rate"
    assert [h["value"] for h in document["history"]] == [12.5]
    assert document["reached_max_value"]  # max_value passed: the capacity may be higher
    assert document["best_value"] == 12.5
    for entry in document["history"]:
        config = (folder / entry["run_dir"] / "config.yaml").read_text()
        assert f"arrival_rate: {entry['value']}" in config
    assert "capacity: 12.5" in result.output


_CAPACITY_KEY = "capacity-gateway-key-0c7e4a"


def test_the_headers_are_read_before_the_search_and_sent_by_every_probe(tmp_path: Path) -> None:
    """An unset ``${NAME}`` of the client's headers stops the search before the server starts
    or any folder is made (was: at the first probe, in a search folder); set, every probe's
    requests carry it (the shared simulator answers 401 without it)."""
    (tmp_path / "rate.yaml").write_text(
        RATE_SCENARIO
        + f"simulator: {{required_headers: {{X-Api-Key: {_CAPACITY_KEY}}}}}\n"
        + "client:\n  headers:\n    X-Api-Key: ${S21B_CAPACITY_KEY}\n",
        encoding="utf-8",
    )
    path = tmp_path / "search.yaml"
    path.write_text(RATE.format(out=tmp_path / "out"), encoding="utf-8")
    args = ["capacity-search", str(path), "--no-plots", "-q"]
    unset = CliRunner().invoke(cli.main, args, env={"S21B_CAPACITY_KEY": None})
    assert unset.exit_code == 2, unset.output
    line = RATE_SCENARIO.count("\n") + 4  # (the X-Api-Key line of rate.yaml)
    assert (
        f"{tmp_path / 'rate.yaml'}:{line}:5: client.headers.X-Api-Key: ${{S21B_CAPACITY_KEY}} "
        "is not set (or is empty) in this environment"
    ) in unset.stderr
    assert not (tmp_path / "out").exists()
    done = CliRunner().invoke(cli.main, args, env={"S21B_CAPACITY_KEY": _CAPACITY_KEY})
    assert done.exit_code == 0, done.output
    (folder,) = (tmp_path / "out").iterdir()
    document = json.loads((folder / "capacity.json").read_text())
    assert document["best_value"] == 12.5
    for entry in document["history"]:
        rows = pq.read_table(folder / entry["run_dir"] / "requests.parquet").to_pylist()
        assert {row["status"] for row in rows} == {"ok"}
