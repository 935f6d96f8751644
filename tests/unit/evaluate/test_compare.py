"""veeksha compare of run folders: what the side-by-side table says beyond the numbers (how each
run ended, SLOs, phases, scenario differences), the direction of a change, and 80 columns."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from rich.console import Console

from tests.unit.evaluate.test_cli import _run_folder
from veeksha.cli import main
from veeksha.evaluate.compare import ComparedRun, render_compare, scenario_differences

_NAMES = ("20261126T171818Z-62b3720138", "20261126T171826Z-f8ed66a645")


def _slo(metric: str, percentile: float, threshold: float, observed: float) -> dict[str, Any]:
    return {
        "name": f"{metric} under {threshold}",
        "metric": metric,
        "percentile": percentile,
        "threshold": threshold,
        "observed": observed,
        "samples": 30,
        "met": observed <= threshold,
        "unfinished": 0,
        "beyond_finished": False,
        "unit": "s",
    }


def _summary(
    ttfc_p99: float = 0.04,
    requests_per_s: float = 5.0,
    slos: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A summary.json document with the headline's sections (seconds, as the files hold)."""
    results = slos or []
    return {
        "schema_version": 1,
        "run": {"interrupted": False, "stop_reason": "completed"},
        "requests": {"total": 30, "ok": 30, "cancelled": 0},
        "errors": {"error_rate": 0.0},
        "throughput": {"window_s": 6.0, "requests_per_s": requests_per_s},
        "goodput": {"requests_per_s": requests_per_s * 0.8},
        "latency": {"ttfc": {"p50": ttfc_p99 / 2, "p99": ttfc_p99}},
        "health": {"verdict": "PASS"},
        "slos": {
            "all_met": all(s["met"] for s in results) if results else None,
            "results": results,
        },
        **extra,
    }


def _folder(root: Path, name: str, summary: dict[str, Any], config: str | None = None) -> Path:
    run = root / name
    run.mkdir()
    (run / "summary.json").write_text(json.dumps(summary))
    if config is not None:
        (run / "config.yaml").write_text(config)
    return run


def _compare(*runs: Path, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(
        main, ["compare", *map(str, runs)], env={"COLUMNS": "80", **(env or {})}
    )
    assert result.exit_code == 0, result.output
    return result.output


def _render(runs: list[ComparedRun], width: int = 80, color: bool = False) -> str:
    out = io.StringIO()
    console = Console(
        file=out,
        width=width,
        force_terminal=color,
        color_system="standard" if color else None,
    )
    render_compare(console, runs)
    return out.getvalue()


def _fits(text: str) -> None:
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_a_run_folders_name_is_never_cut_at_80_columns(tmp_path: Path) -> None:
    slo = [_slo("ttfc", 0.99, 0.03, 0.041)]
    a = _folder(tmp_path, _NAMES[0], _summary(slos=slo))
    b = _folder(tmp_path, _NAMES[1], _summary(0.08, slos=slo))
    text = _compare(a, b)
    _fits(text)
    for name in _NAMES:  # whole on one line: a column's header, or the legend's
        assert any(name in line for line in text.splitlines()), text


def test_three_runs_at_80_columns_are_lettered_with_a_legend() -> None:
    names = [*_NAMES, "20261126T171834Z-caee952a23"]
    runs = [ComparedRun(n, _summary(0.04 + 0.01 * i)) for i, n in enumerate(names)]
    text = _render(runs)
    _fits(text)
    for letter, name in zip("ABC", names, strict=True):
        assert f"{letter}  {name}" in text.splitlines()
    assert "+25.0%" in text  # B's TTFC p99 against A's: no cell wraps


def test_lower_latency_is_green_and_lower_throughput_red() -> None:
    runs = [
        ComparedRun("base", _summary(0.04, 5.0)),
        ComparedRun("other", _summary(0.02, 4.0, errors={"error_rate": 0.05})),
    ]
    text = _render(runs, width=120, color=True)
    red, green = "\x1b[31m", "\x1b[32m"
    ttfc = next(line for line in text.splitlines() if line.startswith("TTFC p99"))
    rate = next(line for line in text.splitlines() if line.startswith("requests/s"))
    assert f"{green}(-50.0%)" in ttfc  # faster: better
    assert f"{red}(-20.0%)" in rate  # fewer requests/s: worse
    errors = next(line for line in text.splitlines() if line.startswith("error rate"))
    assert f"{red}(new)" in errors  # failures where there were none: worse
    window = next(line for line in text.splitlines() if line.startswith("window"))
    assert "\x1b[3" not in window.split("6 s")[-1]  # the window's change is neither


def test_without_slos_the_slo_row_says_dash_not_none(tmp_path: Path) -> None:
    a = _folder(tmp_path, "a", _summary())
    b = _folder(tmp_path, "b", _summary(0.05))
    text = _compare(a, b)
    assert "None" not in text
    assert re.search(r"^SLOs\s+-\s+-$", text, re.MULTILINE), text


def test_runs_whose_slos_differ_show_each_slo_and_no_change_of_goodput(tmp_path: Path) -> None:
    a = _folder(tmp_path, "a", _summary(slos=[_slo("ttfc", 0.99, 0.03, 0.041)]))
    b = _folder(tmp_path, "b", _summary(slos=[_slo("e2e", 0.99, 0.45, 0.505)]))
    c = _folder(tmp_path, "c", _summary(requests_per_s=6.0, slos=[_slo("ttfc", 0.99, 0.03, 0.02)]))
    text = _compare(a, b, c)
    _fits(text)
    lines = text.splitlines()
    goodput = next(line for line in lines if line.startswith("goodput"))
    assert goodput.split() == ["goodput", "requests/s", "4", "/s", "4", "/s", "*", "4.8", "/s",
                               "(+20.0%)"]  # fmt: skip
    ttfc = next(line for line in lines if line.startswith("SLO ttfc p99 ≤ 30 ms"))
    assert ttfc.split()[-7:] == ["41", "ms", "unmet", "-", "20", "ms", "met"]
    e2e = next(line for line in lines if line.startswith("SLO e2e p99 ≤ 450 ms"))
    assert e2e.split()[-5:] == ["-", "505", "ms", "unmet", "-"]
    joined = " ".join(text.split())
    assert "* b's SLOs are not a's: its goodput counts the requests that met its own SLOs" in (
        joined
    )
    assert "c's SLOs" not in joined


def test_a_killed_run_without_summary_json_is_said_to_be_partial(tmp_path: Path) -> None:
    done = _run_folder(tmp_path / "done", 0.05)
    killed = _run_folder(tmp_path / "killed", 0.05, partial=True)
    text = _compare(done, killed)
    assert not (killed / "summary.json").exists()  # evaluated in memory, nothing written
    assert re.search(r"^ended\s+-\s+killed$", text, re.MULTILINE), text
    joined = " ".join(text.split())
    assert "killed: partial run: it did not end" in joined
    assert "an unknown number of dispatched requests" in joined


def test_an_interrupted_run_is_said_to_cover_what_was_recorded(tmp_path: Path) -> None:
    run = {"interrupted": True, "stop_reason": "interrupted"}
    a = _folder(tmp_path, "a", _summary())
    b = _folder(tmp_path, "b", _summary(run=run, requests={"total": 40, "ok": 30, "cancelled": 10}))
    text = _compare(a, b)
    assert re.search(r"^ended\s+completed\s+interrupted$", text, re.MULTILINE), text
    assert re.search(r"^cancelled\s+0\s+10$", text, re.MULTILINE), text
    assert "b: interrupted: its numbers cover what was recorded before the stop" in (
        " ".join(text.split())
    )


def test_abandoned_requests_have_a_row_when_a_run_has_some(tmp_path: Path) -> None:
    a = _folder(tmp_path, "a", _summary())
    b = _folder(tmp_path, "b", _summary(requests={"total": 30, "ok": 24, "abandoned": 6}))
    text = _compare(a, b)
    assert re.search(r"^abandoned\s+0\s+6$", text, re.MULTILINE), text
    assert not re.search(r"^abandoned", _compare(a, a), re.MULTILINE)


def test_a_run_not_streamed_says_its_ttfc_is_the_whole_answer(tmp_path: Path) -> None:
    a = _folder(tmp_path, "a", _summary(0.04))
    run = {"interrupted": False, "stop_reason": "completed", "not_streamed": ["default"]}
    b = _folder(tmp_path, "b", _summary(0.4, run=run))
    text = " ".join(_compare(a, b).split())
    assert "b: not streamed, client.stream: false: TTFC is the whole answer's time" in text
    assert "a: not streamed" not in text


def _phase(ttfc_p99: float, rate: float) -> dict[str, Any]:
    return {
        "throughput": {"requests_per_s": rate},
        "latency": {"ttfc": {"p99": ttfc_p99}, "e2e": {"p99": 0.5}},
        "errors": {"error_rate": 0.0},
        "slos": {"all_met": True, "results": []},
    }


def test_runs_with_phases_are_compared_phase_by_phase(tmp_path: Path) -> None:
    a = _summary(phases={"rate_4": _phase(0.027, 5.6), "rate_16": _phase(0.048, 17.7)})
    b = _summary(phases={"rate_4": _phase(0.041, 5.5), "rate_8": _phase(0.05, 8.0)})
    text = _compare(_folder(tmp_path, "a", a), _folder(tmp_path, "b", b))
    _fits(text)
    after = text[text.index("phases (change relative to the first run's same phase)") :]
    rows = after.splitlines()
    at = rows.index(next(r for r in rows if r.strip() == "rate_4"))
    assert rows[at + 2].split() == ["TTFC", "p99", "27", "ms", "41", "ms", "(+51.9%)"]
    at = rows.index(next(r for r in rows if r.strip() == "rate_16"))
    assert rows[at + 2].split() == ["TTFC", "p99", "48", "ms", "-"]  # b has no such phase
    at = rows.index(next(r for r in rows if r.strip() == "rate_8"))
    assert rows[at + 1].split() == ["requests/s", "-", "8", "/s"]
    assert "over all its measured phases together" in " ".join(text.split())


_CONFIG = """seed: 42
client: {api_base: 'http://127.0.0.1:18401/v1', model: m}
evaluators:
- {type: performance, slos: []}
output_dir: /tmp/a
"""


def test_a_scenario_that_differs_is_named_key_by_key(tmp_path: Path) -> None:
    other = _CONFIG.replace("18401", "18402").replace("/tmp/a", "/tmp/b")
    a = _folder(tmp_path, "a", _summary(), _CONFIG)
    same = _folder(tmp_path, "same", _summary(), _CONFIG.replace("/tmp/a", "/tmp/b"))
    b = _folder(tmp_path, "b", _summary(), other.replace("seed: 42", "seed: 7"))
    text = " ".join(_compare(a, same, b).split())
    assert "b's scenario differs from a's in: seed, client.api_base" in text
    assert "same's scenario" not in text  # (output_dir is where it wrote, not what it ran)


def test_scenario_differences_walk_mappings_and_lists_of_equal_length() -> None:
    first = {"a": {"b": 1, "c": [1, 2]}, "d": [1], "e": None}
    other = {"a": {"b": 2, "c": [1, 3]}, "d": [1, 2], "f": 1}
    assert scenario_differences(first, other) == ["a.b", "a.c[1]", "d", "e", "f"]
    assert scenario_differences(first, first) == []


def test_a_summary_json_that_is_no_evaluation_is_evaluated_again(tmp_path: Path) -> None:
    run = _run_folder(tmp_path / "run", 0.05)
    (run / "summary.json").write_text("{}")
    text = _compare(_run_folder(tmp_path / "base", 0.05), run)
    ttfc = next(line for line in text.splitlines() if line.startswith("TTFC p50"))
    assert ttfc.split() == ["TTFC", "p50", "50", "ms", "50", "ms", "(+0.0%)"], text


def test_compare_at_80_columns_cuts_no_value() -> None:
    summary = _summary(123.456, 12_345.678, slos=[_slo("normalized_e2e", 0.999, 0.0123, 0.5)])
    runs = [ComparedRun(name, summary) for name in _NAMES]
    text = _render(runs)
    _fits(text)
    assert "12.35k /s" in text
    assert "123.5k ms" in text


def test_compare_says_which_runs_ramped_and_where_their_latency_per_rate_is() -> None:
    flat = _summary()
    ramped = _summary() | {
        "ramp": {"shape": "linear", "start_rate": 2.0, "end_rate": 16.0, "duration": 12.0}
    }
    runs = [ComparedRun("constant", flat), ComparedRun("ramped", ramped)]
    text = _render(runs)
    row = next(line for line in text.splitlines() if "ramp (rates /s)" in line)
    assert "-" in row
    assert "2 → 16 linear, 12 s" in row
    assert "over its whole ramp" in text
    assert "veeksha report RUN" in text
    _fits(text)
    plain = _render([ComparedRun("constant", flat), ComparedRun("again", flat)])
    assert "ramp (rates" not in plain
    assert "whole ramp" not in plain


def test_a_reasoning_models_answer_ttfc_is_compared_only_where_a_run_has_it() -> None:
    answer = {"count": 30, "p50": 0.5, "p99": 0.8}
    thinking = _summary(0.04)
    thinking["latency"]["answer_ttfc"] = answer
    faster = _summary(0.04)
    faster["latency"]["answer_ttfc"] = answer | {"p50": 0.25}
    text = _render([ComparedRun("base", thinking), ComparedRun("other", faster)])
    _fits(text)
    lines = text.splitlines()
    names = [line.split("  ")[0].strip("│ ") for line in lines]
    at = names.index("TTFC p99")
    assert names[at + 1 : at + 3] == ["answer TTFC p50", "answer TTFC p99"]
    assert "500 ms" in lines[at + 1]
    assert "250 ms (-50.0%)" in lines[at + 1]
    plain = _render([ComparedRun("base", _summary(0.04)), ComparedRun("other", _summary(0.05))])
    assert "answer TTFC" not in plain


def _server(ttft_s: float, kv: float, hits: float, waiting: float) -> dict[str, Any]:
    """summary.json's ``server`` section of a scraped server (its histograms' means)."""
    return {
        "scrapes": 12,
        "running_mean": 3.2,
        "running_peak": 8.0,
        "waiting_mean": waiting,
        "waiting_peak": 4.0,
        "kv_usage_peak": kv,
        "prefix_hit_rate": hits,
        "preemptions": 0.0,
        "finished": 30.0,
        "latency": {"ttft": {"count": 30, "mean": ttft_s}, "e2e": {"count": 30, "mean": 0.1}},
    }


def test_the_servers_views_are_compared_in_a_table_of_their_own() -> None:
    base = _summary(server=_server(0.020, 0.5, 0.4, 0.5))
    other = _summary(server=_server(0.030, 0.25, 0.6, 1.0))
    text = _render([ComparedRun(_NAMES[0], base), ComparedRun(_NAMES[1], other)])
    _fits(text)
    lines = text.splitlines()
    assert "server's view (latency: the means of its histograms)" in lines
    row = {line.split("  ")[0]: line for line in lines}
    assert row["TTFT mean"].split()[-3:] == ["30", "ms", "(+50.0%)"]
    assert row["KV cache usage (peak)"].split()[-3:] == ["25", "%", "(-50.0%)"]
    assert row["E2E mean"].split()[-3:] == ["100", "ms", "(+0.0%)"]
    assert "queued mean" not in row  # (no run's server has that histogram)
    # colours: a slower server, a longer queue are worse; more prefix-cache hits better
    coloured = _render([ComparedRun("a", base), ComparedRun("b", other)], width=120, color=True)
    red, green = "\x1b[31m", "\x1b[32m"
    painted = {line.split("  ")[0]: line for line in coloured.splitlines()}
    assert f"{red}(+50.0%)" in painted["TTFT mean"]
    assert f"{red}(+100.0%)" in painted["waiting (mean)"]
    assert f"{green}(+50.0%)" in painted["prefix-cache hit rate"]
    assert "\x1b[3" not in painted["KV cache usage (peak)"].split("25 %")[-1]  # neither
    # a run without the server's metrics: dashes in its column; none at all: no table
    text = _render([ComparedRun("a", _summary()), ComparedRun("b", other)])
    ttft = next(line for line in text.splitlines() if line.startswith("TTFT mean"))
    assert ttft.split()[2:] == ["-", "30", "ms"]  # (no change from a value A does not have)
    assert "server's view" not in _render([ComparedRun("a", _summary())] * 2)


def test_each_scraped_server_is_compared_under_the_servers_sums() -> None:
    def several(slow_ttft_s: float) -> dict[str, Any]:
        server = _server(0.02, 0.5, 0.4, 0.5)
        server["servers"] = ["http://a:8000/metrics", "http://b:8000/metrics"]
        server["per_server"] = [
            {"server": "0", "running_mean": 2.0, "waiting_peak": 1.0, "kv_usage_peak": 0.5,
             "finished": 20.0, "latency": {"ttft": {"count": 20, "mean": 0.02}}},
            {"server": "1", "running_mean": 1.2, "waiting_peak": 3.0, "kv_usage_peak": 0.25,
             "finished": 10.0, "latency": {"ttft": {"count": 10, "mean": slow_ttft_s}}},
        ]  # fmt: skip
        return server

    runs = [
        ComparedRun(_NAMES[0], _summary(server=several(0.04))),
        ComparedRun(_NAMES[1], _summary(server=several(0.08))),
    ]
    text = _render(runs)
    _fits(text)
    lines = [line.rstrip() for line in text.splitlines()]
    assert "servers' views (their sums, then each server's; latency: histogram means)" in lines
    first = lines.index("server 0")
    second = lines.index("server 1")
    own = [line.split("  ")[1] for line in lines[second + 1 : second + 6]]
    assert own == [
        "running (mean)",
        "waiting (peak)",
        "KV cache usage (peak)",
        "requests finished",
        "TTFT mean",
    ]
    assert lines[second + 5].split()[-3:] == ["80", "ms", "(+100.0%)"]  # the slower replica
    assert lines[first + 5].split()[-3:] == ["20", "ms", "(+0.0%)"]


def test_one_folder_is_refused_as_one_sweep_is(tmp_path: Path) -> None:
    """(one run folder printed a one-column table while one sweep folder was refused)"""
    run = _folder(tmp_path, "run", _summary())
    result = CliRunner().invoke(main, ["compare", str(run)])
    assert result.exit_code == 2
    assert result.output == (
        f"error: compare needs two folders or more (got one, {run}): give another run, sweep "
        "or repeats folder to compare it with; veeksha report FOLDER shows one alone\n"
    )


def test_the_runs_labels_are_set_side_by_side(tmp_path: Path) -> None:
    """(the scenario's ``labels``, summary.json's ``run.labels``: what the runs were, first)"""
    a, b = _summary(), _summary(0.08)
    a["run"]["labels"] = {"gpu": "H100", "tp": 2}
    b["run"]["labels"] = {"gpu": "A100", "engine": "vllm 0.11"}
    text = _compare(_folder(tmp_path, "a", a), _folder(tmp_path, "b", b))
    _fits(text)
    lines = text.splitlines()
    start = lines.index("labels (the scenarios' labels)")
    rows = [" ".join(line.split()) for line in lines[start + 1 : start + 7]]
    assert "engine - vllm 0.11" in rows
    assert "gpu H100 A100" in rows
    assert "tp 2 -" in rows
    assert lines.index("labels (the scenarios' labels)") < next(
        i for i, line in enumerate(lines) if line.lstrip().startswith("TTFC")
    )
    no_labels = _compare(_folder(tmp_path, "c", _summary()), _folder(tmp_path, "d", _summary()))
    assert "labels" not in no_labels
