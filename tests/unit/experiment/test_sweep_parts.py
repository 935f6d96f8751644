"""The pieces of a sweep that need no run: exit code, folder names, groups, the table's view of
point folders in every state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veeksha.experiment.sweep import (
    create_sweep,
    is_complete,
    point_folder,
    point_groups,
    sweep_exit_code,
)
from veeksha.experiment.sweep_table import (
    progress_line,
    read_table,
    sweep_table,
    value_columns,
    write_outputs,
)
from veeksha.scenario.loader import load_points_text

SWEEP = "seed: 1\nclient: {model: !expand [a, b/c d, e]}\n"


@pytest.mark.parametrize(
    ("codes", "interrupted", "expected"),
    [
        ([0, 0], False, 0),
        ([0, 5, 4], False, 4),
        ([5, 3, None], False, 3),
        ([3, 2], False, 2),
        ([2, 1], False, 1),
        ([0, 5], True, 3),
        ([None], False, 0),
    ],
)
def test_the_sweep_exits_with_its_most_severe_point(
    codes: list[int | None], interrupted: bool, expected: int
) -> None:
    assert sweep_exit_code(codes, interrupted) == expected


def test_point_folders_are_safe_names_that_show_the_point() -> None:
    points = load_points_text(SWEEP, "s.yaml").points
    assert [point_folder(p) for p in points] == ["000-model=a", "001-model=b_c_d", "002-model=e"]
    long = load_points_text("client: {model: !expand ['" + "x" * 300 + "']}\n", "s.yaml")
    assert len(point_folder(long.points[0])) == 104
    # without a `server:` section every point shares one group (one server lifecycle)
    assert [[p.index for p in g] for g in point_groups(points)] == [[0, 1, 2]]


def test_a_managed_simulator_serves_each_points_client_window() -> None:
    # the simulator takes client.max_model_len when simulator.max_model_len is left out; a
    # managed one did not, and its identity left the window out, so every point of a sweep
    # over client.max_model_len ran against one server with the default 131072
    from veeksha.server.managed import server_identity

    def windows(points: list) -> list[int]:
        """The window each point's server runs with, as its identity holds it."""
        return [
            json.loads(server_identity(p.scenario) or "{}")["simulator"]["max_model_len"]
            for p in points
        ]

    sweep = "server: {type: veeksha_sim}\nclient: {max_model_len: !expand [2048, 4096]}\n"
    points = load_points_text(sweep, "s.yaml").points
    assert windows(points) == [2048, 4096]  # (131072 each)
    assert [[p.index for p in g] for g in point_groups(points)] == [[0], [1]]  # (one group)
    # the simulator's own window set: it is kept, and the points share one server
    own = load_points_text(sweep + "simulator: {max_model_len: 8192}\n", "s.yaml").points
    assert windows(own) == [8192, 8192]
    assert [[p.index for p in g] for g in point_groups(own)] == [[0, 1]]


def test_a_value_column_never_takes_the_name_of_a_table_column() -> None:
    manifest = {
        "swept_keys": ["a.status", "b.rate"],
        "short_names": {"a.status": "status", "b.rate": "rate"},
    }
    assert value_columns(manifest) == {"a.status": "a.status", "b.rate": "rate"}


def _summary(interrupted: bool = False, stop: str = "completed", verdict: str = "PASS") -> dict:
    return {
        "run": {"interrupted": interrupted, "stop_reason": stop},
        "requests": {"total": 4, "ok": 4},
        "throughput": {"requests_per_s": 2.0, "window_s": 2.0},
        "latency": {"ttfc": {"p50": 0.01, "p99": 0.02}},
        "health": {"verdict": verdict},
        "slos": {"all_met": False},
    }


def test_the_table_shows_every_state_a_point_folder_can_be_in(tmp_path: Path) -> None:
    loaded = load_points_text("seed: !expand [1, 2, 3, 4, 5, 6]\n", "s.yaml")
    sweep_dir = create_sweep(loaded, tmp_path)
    folders = [sweep_dir / point_folder(p) for p in loaded.points]
    for folder in folders[:5]:
        folder.mkdir()
    (folders[0] / "summary.json").write_text(json.dumps(_summary()))
    (folders[1] / "summary.json").write_text(json.dumps(_summary(True, "interrupted")))
    (folders[2] / "summary.json").write_text(json.dumps(_summary(True, "worker_failure", "FAIL")))
    (folders[3] / "point.json").write_text(json.dumps({"error": "unreachable", "exit_code": 2}))
    table = sweep_table(sweep_dir)
    assert table["seed"].tolist() == [1, 2, 3, 4, 5, 6]
    assert table["status"].tolist() == [
        "complete",
        "interrupted",
        "aborted",
        "error",
        "incomplete",
        "not_run",
    ]
    assert table["exit_code"].tolist()[:4] == [5, 3, 3, 2]
    assert table["exit_code"].isna().tolist()[4:] == [True, True]
    assert table["health"].tolist()[2] == "FAIL"
    assert table["error"].tolist()[3] == "unreachable"
    assert table["ttfc_p99_s"].tolist()[0] == 0.02
    assert [is_complete(f) for f in folders] == [True, False, False, False, False, False]


def test_a_swept_integer_past_int64_is_written_as_a_number(tmp_path: Path) -> None:
    """arrival_rate: !expand [10**30, 12] is a valid sweep (a float key); its swept value, an
    integer no Parquet integer holds, made writing sweep.parquet crash after every point ran."""
    loaded = load_points_text(
        "traffic_scheduler:\n  interval_generator:\n"
        "    arrival_rate: !expand [1000000000000000000000000000000, 12]\n",
        "s.yaml",
    )
    sweep_dir = create_sweep(loaded, tmp_path)
    write_outputs(sweep_dir, plots=False)
    assert read_table(sweep_dir)["arrival_rate"].tolist() == [1e30, 12.0]


def test_the_manifest_redacts_secrets_as_the_loader_does() -> None:
    from veeksha.experiment import sweep
    from veeksha.scenario import loader

    assert sweep.REDACTED == loader.REDACTED


def test_secrets_given_on_the_command_line_never_reach_the_sweep_folder(tmp_path: Path) -> None:
    overrides = ["client.api_key=sk-never", "runtime.max_sessions=3"]
    loaded = load_points_text(SWEEP, "s.yaml", overrides)
    sweep_dir = create_sweep(loaded, tmp_path, overrides)
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    assert manifest["overrides"] == ["client.api_key=***", "runtime.max_sessions=3"]
    assert not any("sk-never" in f.read_text() for f in sweep_dir.iterdir())


def test_compare_matches_points_on_equal_values_whatever_their_type() -> None:
    import pandas as pd

    from veeksha.experiment.sweep_compare import matched_changes

    def table(rates: list[object], ttfc: list[float]) -> pd.DataFrame:
        frame = pd.DataFrame({"index": range(len(rates)), "rate": rates, "ttfc_p50_s": ttfc})
        frame["point"] = [f"rate={r}" for r in rates]
        frame["health"] = ["PASS"] * len(rates)
        for column in ("requests_per_s", "output_tokens_per_s", "ttfc_p99_s", "tpot_p50_s"):
            frame[column] = 1.0
        for column in ("tpot_p99_s", "e2e_p50_s", "e2e_p99_s", "error_rate"):
            frame[column] = None
        return frame

    first = table([4, 8, 16], [0.01, 0.02, 0.04])
    other = table([8.0, 4.0], [0.03, 0.01])
    changes = matched_changes(first, other, ["rate"])
    assert [c["matched"] for c in changes] == ["rate=4.0", "rate=8.0", None]
    assert [c["ttfc_p50_s"] for c in changes] == [0.0, pytest.approx(0.5), None]
    assert changes[0]["e2e_p99_s"] is None


def test_plots_that_cannot_be_drawn_leave_the_table_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veeksha.experiment import sweep_plots

    def broken(*_args: object) -> None:  # (as a second Ctrl-C leaves a half-imported matplotlib)
        raise AttributeError("module 'matplotlib' has no attribute '_docstring'")

    monkeypatch.setattr(sweep_plots, "write_sweep_plots", broken)
    loaded = load_points_text("seed: !expand [1, 2]\n", "s.yaml")
    sweep_dir = create_sweep(loaded, tmp_path)
    (sweep_dir / point_folder(loaded.points[0])).mkdir()
    (sweep_dir / point_folder(loaded.points[0]) / "summary.json").write_text(json.dumps(_summary()))
    failures: list[Exception] = []
    table = write_outputs(sweep_dir, plot_failed=failures.append)
    assert [str(f) for f in failures] == ["module 'matplotlib' has no attribute '_docstring'"]
    assert table["status"].tolist() == ["complete", "not_run"]
    assert read_table(sweep_dir)["status"].tolist() == ["complete", "not_run"]
    (sweep_dir / "sweep.parquet").unlink()
    with pytest.raises(AttributeError):  # (`veeksha report SWEEP_DIR` says it loudly)
        write_outputs(sweep_dir)
    assert (sweep_dir / "sweep.parquet").exists()


@pytest.mark.parametrize("interrupted", [True, False])
def test_ctrl_c_while_the_table_is_written_still_says_how_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interrupted: bool
) -> None:
    # was: a second Ctrl-C in write_outputs left run_sweep before its "resume with" line
    from veeksha.experiment import sweep, sweep_table

    def stopped(*_args: object, **_kwargs: object) -> bool:  # a point stopped by Ctrl-C, or done
        return interrupted

    def ctrl_c(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "_run_one", stopped)
    monkeypatch.setattr(sweep_table, "write_outputs", ctrl_c)
    loaded = load_points_text("seed: !expand [1, 2]\n", "s.yaml")
    sweep_dir = create_sweep(loaded, tmp_path)
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):  # (the command then says "interrupted", exit 3)
        sweep.run_sweep(sweep_dir, loaded, quiet=True, plots=False, echo=lines.append)
    assert lines == [
        f"sweep interrupted while writing its table; resume with: veeksha run --resume {sweep_dir}"
    ]


def _sweep_of(root: Path, api_base: str) -> Path:
    """A sweep over the seed whose two points ran (a summary and a config.yaml each)."""
    loaded = load_points_text("seed: !expand [1, 2]\n", "s.yaml")
    sweep_dir = create_sweep(loaded, root)
    for point in loaded.points:
        folder = sweep_dir / point_folder(point)
        folder.mkdir()
        (folder / "summary.json").write_text(json.dumps(_summary()))
        seed = point.values["seed"]
        (folder / "config.yaml").write_text(f"seed: {seed}\nclient: {{api_base: '{api_base}'}}\n")
    return sweep_dir


def test_compare_of_sweeps_names_the_scenario_keys_that_differ_besides_the_swept(
    tmp_path: Path,
) -> None:
    from click.testing import CliRunner

    from veeksha.cli import main

    first = _sweep_of(tmp_path / "a", "http://127.0.0.1:8000/v1")
    same = _sweep_of(tmp_path / "b", "http://127.0.0.1:8000/v1")
    other = _sweep_of(tmp_path / "c", "http://127.0.0.1:9000/v1")
    plot = tmp_path / "cmp.png"
    args = ["compare", str(first), str(same), str(other), "--plot", str(plot)]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    said = f"{other.name}'s scenario differs from {first.name}'s (besides the swept keys) in:"
    lines = [line for line in result.output.splitlines() if "scenario differs" in line]
    assert lines == [f"{said} client.api_base"]  # (not the seed: it is swept; not `same`)


def test_compare_of_a_run_with_a_sweep_refuses_in_one_line_saying_what_to_compare(
    tmp_path: Path,
) -> None:
    from click.testing import CliRunner

    from veeksha.cli import main

    sweep = _sweep_of(tmp_path / "a", "http://127.0.0.1:8000/v1")
    run = next(p for p in sweep.iterdir() if p.is_dir())
    result = CliRunner().invoke(main, ["compare", str(run), str(sweep)])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: compare takes run folders or sweep folders, not both (")
    assert line.endswith(
        "compare runs with a sweep's point folders (each a run folder), or sweeps with sweeps"
    )


def test_a_points_progress_line_shows_numbers_as_the_run_report_does() -> None:
    # 4 significant digits, not 2 or 1 fixed decimals: 254 req/s, a 30 µs TTFC as 0.03 ms
    summary = {
        "throughput": {"requests_per_s": 254.0},
        "latency": {"ttfc": {"p50": 0.00003, "p99": 0.18904}, "e2e": {"p99": 0.5195}},
        "health": {"verdict": "PASS"},
    }
    assert progress_line("002-arrival_rate=24", summary, 4.4) == (
        "002-arrival_rate=24: 254 req/s, TTFC p50 0.03 ms, p99 189 ms, E2E p99 519.5 ms,"
        " health PASS, SLOs - (4.4 s)"
    )


def _slo(threshold: float, met: bool) -> dict:
    return {"metric": "ttfc", "percentile": 0.99, "threshold": threshold, "met": met}


def _sweep_with(root: Path, summaries: list[dict | None]) -> Path:
    """A sweep over the seed whose points wrote these summaries (None: a folder without one)."""
    values = ", ".join(str(i + 1) for i in range(len(summaries)))
    loaded = load_points_text(f"seed: !expand [{values}]\n", "s.yaml")
    sweep_dir = create_sweep(loaded, root)
    for point, summary in zip(loaded.points, summaries, strict=True):
        folder = sweep_dir / point_folder(point)
        folder.mkdir()
        if summary is not None:
            slos = summary.pop("slo_results", [])
            summary["slos"] = {"all_met": all(s["met"] for s in slos), "results": slos}
            for slo in slos:
                slo |= {"samples": 4, "observed": 0.02}
            (folder / "summary.json").write_text(json.dumps(summary))
    return sweep_dir.rename(root / f"sweep-{root.name}")  # (a name of its own: A, B)


def test_compare_of_sweeps_says_how_points_ended_and_where_slos_differ(tmp_path: Path) -> None:
    # was: compare of sweeps printed only relative changes, silent on a point that was
    # interrupted or killed and on points judged by other SLOs or with other verdicts
    from click.testing import CliRunner

    from veeksha.cli import main

    met = [_slo(0.2, True)]
    first = _sweep_with(tmp_path / "a", [_summary() | {"slo_results": met} for _ in range(4)])
    stopped = _summary(True, "interrupted") | {"slo_results": [_slo(0.2, True)]}
    killed = _summary() | {"slo_results": [_slo(0.2, True)]}
    killed["run"] |= {"partial": True, "unrecorded_requests": 2}
    other = _sweep_with(
        tmp_path / "b",
        [
            stopped,
            _summary() | {"slo_results": [_slo(0.2, False)]},  # the same SLO, unmet
            _summary() | {"slo_results": [_slo(0.1, True)]},  # another bound
            killed,
        ],
    )
    args = ["compare", str(first), str(other), "--plot", str(tmp_path / "cmp.png")]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    a, b = first.name, other.name
    stop = "interrupted: its numbers cover what was recorded before the stop"
    assert f"{b} (seed=1): {stop}" in lines
    (partial,) = [line for line in lines if line.startswith(f"{b} (seed=4): partial run:")]
    assert "at least 2 dispatched requests have no row" in partial
    assert (
        f"{b}'s SLOs are not {a}'s at seed=3: {a} SLO ttfc p99 ≤ 200 ms; {b} SLO ttfc p99 ≤ 100 ms"
        in lines
    )
    assert f"SLO ttfc p99 ≤ 200 ms: met in {a}, unmet in {b} at seed=2" in lines
    assert not [line for line in lines if line.startswith(f"{a} (")]  # every point completed


def test_compare_of_sweeps_names_points_without_results(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from veeksha.cli import main

    first = _sweep_with(tmp_path / "a", [_summary(), _summary()])
    other = _sweep_with(tmp_path / "b", [_summary(), None])
    args = ["compare", str(first), str(other), "--plot", str(tmp_path / "cmp.png")]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith(f"{other.name} (")]
    assert line.startswith(f"{other.name} (seed=2): no results: no summary.json (killed in set-up")
