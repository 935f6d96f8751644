"""``veeksha stress`` and ``veeksha diff`` end to end against the built-in simulator.

Truth for stress: with ``max_num_seqs: 2`` the simulator runs at most two requests at once and
queues the rest, so the output throughput doubles from concurrency 1 to 2 and then stays flat
while TTFC grows with the queue. Truth for diff: prefill's slope is ``1e6 /
prefill_tokens_per_s`` ms per 1k tokens, so doubling the simulator's prefill speed halves it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.experiment.microbench_cli import invoke as _invoke
from tests.integration.experiment.microbench_cli import passed_unless_the_machine_was_busy
from tests.integration.experiment.microbench_cli import results as _results


def test_stress_throughput_stops_growing_at_the_servers_batch_limit(tmp_path: Path) -> None:
    code, output = _invoke(
        "stress",
        "--quick",
        "--concurrencies",
        "1",
        "2",
        "4",
        "--point_duration",
        "2",
        "--warmup_duration",
        "0.5",
        "--output_length",
        "16",
        "--simulator.max_num_seqs",
        "2",
        "--output_dir",
        str(tmp_path),
    )
    folder, doc = _results(tmp_path, "stress")
    passed_unless_the_machine_was_busy(code, output, folder, doc)
    assert doc["traffic"] == "concurrency"
    one, two, four = doc["points"]
    seen = json.dumps(doc["points"], indent=1)
    assert [p["level"] for p in doc["points"]] == [1, 2, 4]
    # (twice the load, nearly twice the throughput: 1.56x with four CPU hogs on two cores)
    assert two["output_tokens_per_s"] > 1.4 * one["output_tokens_per_s"], seen
    # flat: twice the load, at most 25 % more (a closed loop of 2 leaves a slot idle for each
    # HTTP round trip, which the queue at 4 hides: on a busy machine c=2 reads a little low)
    assert 0.9 <= four["output_tokens_per_s"] / two["output_tokens_per_s"] <= 1.25, seen
    assert four["ttfc_p50_ms"] > two["ttfc_p50_ms"] + 50, seen  # the queue, not the engine
    assert all(p["samples"] >= 10 for p in doc["points"])  # (their health: judged above)
    assert (folder / "stress_results.csv").read_text().startswith("level,samples,")
    assert (folder / "stress.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["stress", "--concurrencies", "0", "4"], "concurrencies: every level must be > 0"),
        (["stress", "--rates", "2", "--concurrencies", "2"], "not both"),
        (["stress", "--mode", "sideways"], "--mode:"),
    ],
)
def test_bad_stress_input_exits_2_before_anything_runs(
    tmp_path: Path, args: list[str], message: str
) -> None:
    code, output = _invoke(*args, "--output_dir", str(tmp_path / "out"))
    assert code == 2
    assert message in output
    assert "Traceback" not in output
    assert not (tmp_path / "out").exists()


def _prefill(base: Path, tokens_per_s: int) -> None:
    code, output = _invoke(
        "prefill",
        "--input_lengths",
        "256",
        "4096",  # (a wide span: a loaded machine's ~10 ms per sample moves the slope little)
        "--samples_per_length",
        "2",
        "--no_plots",
        "--simulator.prefill_tokens_per_s",
        str(tokens_per_s),
        "--output_dir",
        str(base),
    )
    folder, doc = _results(base, "prefill")
    passed_unless_the_machine_was_busy(code, output, folder, doc)


def test_diff_of_two_prefill_speeds_finds_the_ratio_of_their_slopes(tmp_path: Path) -> None:
    _prefill(tmp_path / "slow", 10_000)
    _prefill(tmp_path / "fast", 20_000)
    (tmp_path / "stray.json").write_text("{}")  # not a results file: ignored
    code, output = _invoke(
        "diff",
        str(tmp_path / "slow"),  # the output_dir: its result folder is one level down
        str(tmp_path / "fast"),
        "--labels",
        "slow",
        "fast",
        "--output_dir",
        str(tmp_path / "diff"),
    )
    assert code == 0, output
    (folder,) = (tmp_path / "diff").glob("*-diff")
    doc = json.loads((folder / "diff.json").read_text())
    assert doc["benchmarks"] == ["prefill"]
    slope = next(c for c in doc["changes"] if c["metric"] == "slope_ms_per_1k_tokens")
    # the slope is 1e6 / prefill_tokens_per_s: twice the speed, half the slope
    assert slope["b"] / slope["a"] == pytest.approx(0.5, rel=0.10)
    assert slope["change"] == pytest.approx(-0.5, abs=0.05)
    assert {c["point"] for c in doc["changes"]} == {"fit", "L=256", "L=4096"}
    assert "slope_ms_per_1k_tokens" in output
    assert (folder / "diff_prefill.png").stat().st_size > 0
    assert (folder / "diff.csv").read_text().startswith("benchmark,point,metric,a,b,change")
    # nothing comparable: the prefill results against a folder without results
    (tmp_path / "empty").mkdir()
    code, output = _invoke("diff", str(tmp_path / "slow"), str(tmp_path / "empty"))
    assert code == 2
    assert "nothing comparable" in output
    assert "has no results" in output
    assert "Traceback" not in output


def test_ctrl_c_between_points_says_where_the_points_so_far_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C once a level is done, before the next one's run began: was a bare "interrupted"
    # (an interrupt inside a point's traffic said where the points were)
    from veeksha.experiment.microbench import points

    real = points.run_point
    calls: list[int] = []

    def run_point(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # (the next point's set-up)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(points, "run_point", run_point)
    code, output = _invoke(
        "stress",
        "--quick",
        "--concurrencies",
        "1",
        "2",
        "--point_duration",
        "1",
        "--warmup_duration",
        "0",
        "--no_plots",
        "--output_dir",
        str(tmp_path),
    )
    assert code == 3, output
    (folder,) = tmp_path.glob("*-stress")
    assert f"error: interrupted; the points so far are in {folder}" in output
    assert len(list((folder / "points").iterdir())) == 1
