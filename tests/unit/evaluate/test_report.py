"""The terminal report at 80 columns: every metric name and value readable, none cut short."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from veeksha.evaluate.health import lost_shards_note
from veeksha.evaluate.report import _display_unit, number_text, render_summary

_NAMES = (
    "ttfc",
    "tbc",
    "tpot",
    "e2e",
    "normalized_e2e",
    "output_throughput",
    "generator_delay",
    "dispatch_lag",
)


def _stats(unit: str, count: int, values: tuple[float, ...]) -> dict[str, object]:
    keys = ("mean", "p50", "p90", "p99", "p99_9", "max")
    return {"unit": unit, "count": count, **dict(zip(keys, values, strict=True))}


def _summary() -> dict[str, object]:
    """Wide-ranging values: microseconds to minutes, counts in the millions."""
    latency = {}
    for i, name in enumerate(_NAMES):
        unit = "tokens/s" if name == "output_throughput" else "s/token" if "norm" in name else "s"
        scale = 10.0 ** (i - 5)  # 1e-5 s ... 100 s
        latency[name] = _stats(
            unit, 12_345_678, (1.23456 * scale, scale, 3.3 * scale, 47.1 * scale, 93.9, 1234.5)
        )
    return {
        "requests": {"ok": 12_345_678, "total": 12_400_000},
        "errors": {"error_rate": 0.00443},
        "throughput": {"window_s": 3600.5, "requests_per_s": 3429.4},
        "latency": latency,
        "slos": {
            "all_met": False,
            "results": [
                {
                    "name": "P99 time to first chunk under half a second for the chat tier",
                    "metric": "ttfc",
                    "percentile": 0.999,
                    "observed": 0.61234,
                    "threshold": 0.5,
                    "met": False,
                }
            ],
        },
    }


def _render(draw: object, width: int = 80) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False, color_system=None)
    draw(console)  # type: ignore[operator]
    return out.getvalue()


def test_the_report_at_80_columns_cuts_no_name_or_value() -> None:
    summary = _summary()
    text = _render(lambda console: render_summary(console, summary))
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for name in _NAMES:
        assert name in text, name
    latency = summary["latency"]
    assert isinstance(latency, dict)
    for name, stats in latency.items():
        unit, scale = _display_unit(stats["unit"], stats["p50"])
        row = text[text.index(name) :][:162]  # its line, and the next for a two-line label
        assert f"({unit})" in row, (name, unit)
        for key in ("mean", "p50", "p90", "p99", "p99_9", "max"):
            assert number_text(stats[key] * scale) in row, (name, key)
    assert "12.35M" in text  # the count, by the documented suffix rule
    joined = " ".join(text.split())  # the SLO's name may fold over lines, but all of it is there
    for word in ("P99", "chat", "tier", "612.3", "ms"):
        assert word in joined


def test_requests_that_did_not_succeed_are_shown_by_kind_with_their_first_message() -> None:
    """A run whose requests failed says why in its report: each kind's count, share and first
    message (summary.json's ``errors.by_kind``), readable at 80 columns; nothing when all
    succeeded."""
    message = (
        'HTTP 401: {"error":{"message":"header api-key has the wrong value",'
        '"type":"invalid_request_error","code":"invalid_api_key"}}'
    )
    summary = _summary()
    summary["errors"] = {
        "requests": 12_400_000,
        "error_rate": 0.00443,
        "by_kind": {
            "http_4xx": {"count": 54_322, "rate": 0.004381, "example": message},
            "cancelled": {"count": 7, "rate": 5.6e-7},  # (a run recorded before examples)
        },
    }
    text = _render(lambda console: render_summary(console, summary))
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "requests that did not succeed (of 12.4M)" in text
    row = text[text.index("http_4xx") :].splitlines()[0]
    assert "54.32k" in row
    assert "0.4381 %" in row
    # the message column, folded over lines: all of it is there
    table = text[text.index("did not succeed") :].split("latency")[0]
    cells = [line.split("│")[-2] for line in table.splitlines() if line.count("│") == 5]
    assert "".join(message.split()) in "".join("".join(cells).split())
    assert "cancelled" in text
    assert "5.6e-05 %" in text
    del summary["errors"]["by_kind"]
    assert "did not succeed" not in _render(lambda console: render_summary(console, summary))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        (0, "0"),
        (7, "7"),
        (0.0001234, "0.0001234"),
        (12.3456, "12.35"),
        (999.96, "1,000"),
        (1234.4, "1,234"),
        (9999, "9,999"),
        (12_346, "12.35k"),
        (999_999, "1M"),
        (1_234_567, "1.235M"),
        (-12_346, "-12.35k"),
        (3e12, "3T"),
        (4.5e16, "4.5e+16"),
    ],
)
def test_numbers_take_at_most_a_few_characters(value: float | None, text: str) -> None:
    assert number_text(value) == text


@pytest.mark.parametrize(
    ("unit", "typical", "shown", "factor"),
    [
        ("s", 2.5, "s", 1.0),
        ("s", 0.25, "ms", 1e3),
        ("s", 0.00025, "µs", 1e6),
        ("s", 1e-9, "µs", 1e6),
        ("s", None, "µs", 1e6),
        ("s/token", 0.004, "ms/token", 1e3),
        ("tokens/s", 0.5, "tokens/s", 1.0),
    ],
)
def test_a_latency_row_is_shown_in_the_unit_that_makes_its_median_readable(
    unit: str, typical: float | None, shown: str, factor: float
) -> None:
    assert _display_unit(unit, typical) == (shown, pytest.approx(factor))


def test_the_phase_table_at_80_columns() -> None:
    summary = _summary()

    def phase(start: float, verdict: str, met: bool, drain: float | None = None) -> object:
        window = {"start": start, "end": start + 60} | ({} if drain is None else {"drain_s": drain})
        return {
            "window": window,
            "requests": {"ok": 1_234_567},
            "throughput": {"requests_per_s": 20_576.1},
            "latency": {"ttfc": {"p99": 0.04512}, "e2e": {"p99": 12.5}},
            "health": {"verdict": verdict},
            "slos": {"all_met": met},
        }

    summary["phases"] = {
        "rate_4_per_s": phase(2.0, "PASS", True),
        "rate_16": phase(62.0, "FAIL", False, drain=3.25),
    }
    text = _render(lambda console: render_summary(console, summary))
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    table = text[text.index("phases (ok: requests; times in s, latency in ms)") :]
    row = table[table.index("rate_16") :].splitlines()
    expected = ["rate_16", "62.0", "1.235M", "20.58k", "45.12", "12.5k", "FAIL", "unmet"]
    assert row[0].split() == expected
    assert row[1].split() == ["(drain", "3.2)"]
    assert table[table.index("rate_4_per_s") :].split()[:2] == ["rate_4_per_s", "2.0"]


def test_a_phase_that_measured_nothing_says_no_data_not_unmet() -> None:
    summary = _summary()
    empty = {"window": {"start": 2.0, "end": 2.0}, "health": {"verdict": "PASS"}}
    slo = {"name": "e2e", "met": False, "samples": 0, "observed": None}
    summary["phases"] = {
        "idle": empty | {"slos": {"all_met": False, "results": [slo]}},
        "busy": empty | {"slos": {"all_met": False, "results": [slo | {"samples": 9}]}},
    }
    text = _render(lambda console: render_summary(console, summary))
    assert max(len(line) for line in text.splitlines()) <= 80
    table = text[text.index("phases (") :].splitlines()
    idle = next(i for i, line in enumerate(table) if line.split()[:1] == ["idle"])
    assert table[idle].split()[-1] == "no"
    assert table[idle + 1].split() == ["data"]
    busy = next(line for line in table if line.split()[:1] == ["busy"])
    assert busy.split()[-1] == "unmet"


_REFUSED = "GET http://127.0.0.1:9/metrics: Connection refused (nothing listens there)"


def _with_scrapes(scraper: dict[str, object], server: dict[str, object] | None) -> dict:
    """The summary of a run whose scraper gave this account (``run.server_metrics``)."""
    summary = _summary()
    summary["run"] = {"server_metrics": {"url": "http://127.0.0.1:9/metrics", **scraper}}
    if server is not None:
        summary["server"] = server
    return summary


def test_unscraped_metrics_are_said_once_with_why_instead_of_an_empty_table() -> None:
    # every scrape failed: summary.json's server section holds no scrape and no value
    empty = {"scrapes": 0, "first_t": None, "status": "failed", "running_peak": None}
    scraper = {"status": "failed", "scrapes": 7, "failed": 7, "error": _REFUSED, "rows": 0}
    text = _render(lambda console: render_summary(console, _with_scrapes(scraper, empty)))
    joined = " ".join(text.split())
    assert "server's view (" not in text  # (no table of nothing)
    assert joined.count("server metrics could not be scraped") == 1
    assert f"(7 of 7 scrapes failed): {_REFUSED}; the server's view is left out" in joined
    assert max(len(line) for line in text.splitlines()) <= 80
    # the watch's process died before it reported: no server_metrics.parquet, no section
    died = {"status": "failed", "error": "the server watch's process exited with code 1"}
    joined = " ".join(_render(lambda c: render_summary(c, _with_scrapes(died, None))).split())
    assert "server metrics could not be scraped: the server watch's process exited" in joined


def test_some_failed_scrapes_are_said_beside_the_view_of_the_others() -> None:
    server = {"scrapes": 5, "status": "partial", "running_peak": 3.0, "running_mean": 1.5}
    scraper = {"status": "partial", "scrapes": 7, "failed": 2, "error": _REFUSED, "rows": 99}
    text = _render(lambda console: render_summary(console, _with_scrapes(scraper, server)))
    joined = " ".join(text.split())
    assert f"server metrics: 2 of 7 scrapes failed, the first: {_REFUSED}" in joined
    assert "server's view (5 scrapes)" in text
    ok = {"status": "ok", "scrapes": 7, "failed": 0, "error": None, "rows": 99}
    text = _render(lambda console: render_summary(console, _with_scrapes(ok, server)))
    assert "server metrics" not in text
    assert "server's view (5 scrapes)" in text


def test_scrapes_holding_no_known_metric_are_said_instead_of_an_empty_table() -> None:
    # a server whose page holds none of vLLM's, SGLang's, llama.cpp's or TGI's names
    keys = ("running_peak", "running_mean", "waiting_peak", "waiting_mean", "kv_usage_peak")
    keys += ("prefix_hit_rate", "preemptions", "finished")
    server = {"scrapes": 12, "first_t": -0.04, "status": "ok", **dict.fromkeys(keys)}
    ok = {"status": "ok", "scrapes": 12, "failed": 0, "error": None, "rows": 119}
    text = _render(lambda console: render_summary(console, _with_scrapes(ok, server)))
    joined = " ".join(text.split())
    assert "server's view (" not in text  # (no table of nothing)
    assert "server metrics: 12 scrapes, none holding a metric veeksha reads" in joined
    assert "what the server exports is in server_metrics.parquet" in joined
    assert max(len(line) for line in text.splitlines()) <= 80


def _evaluated(**data: object) -> dict[str, object]:
    from tests.unit.evaluate.builders import (
        request,
        requests_table,
        scenario,
        session,
        sessions_table,
    )
    from veeksha.evaluate.run import compute_evaluation

    rows = [request(k, ready=0.1 * k, chunks=(0.1 * k + 0.3,)) for k in range(5)]
    sessions = [session(k, 0.1 * k, 0.1 * k + 0.3) for k in range(5)]
    cfg = scenario(**data)
    return compute_evaluation(cfg, requests_table(rows), sessions_table(sessions), {}).summary


def test_a_run_not_streamed_says_so_beside_its_latency_at_80_columns() -> None:
    summary = _evaluated(client={"stream": False})
    run = summary["run"]
    assert isinstance(run, dict)
    assert run["not_streamed"] == ["default"]
    text = _render(lambda console: render_summary(console, summary))
    assert max(len(line) for line in text.splitlines()) <= 80
    joined = " ".join(text.split())
    note = "not streamed, client.stream: false: TTFC is the whole answer's time (= E2E)"
    assert note in joined
    assert joined.index(note) < joined.index("latency (ok requests)")
    streamed = _evaluated()
    assert "not_streamed" not in streamed["run"]  # type: ignore[operator]
    assert "not streamed" not in _render(lambda console: render_summary(console, streamed))
    two = _evaluated(
        clients=[{"name": "a", "stream": False}, {"name": "b"}, {"name": "c", "stream": False}]
    )
    joined = " ".join(_render(lambda console: render_summary(console, two)).split())
    assert "not streamed (clients a, c), client.stream: false" in joined


def test_health_notes_lead_the_report_as_they_lead_health_txt() -> None:
    # a run's report (veeksha run, a distributed run) gets health.json's content: its notes
    # are printed first, whatever note they are, not only one rebuilt from the run's facts
    summary = _summary()
    health = {"verdict": "PASS", "checks": [], "notes": ["the first note", "a second note"]}
    text = _render(lambda console: render_summary(console, summary, health))
    assert text.splitlines()[:2] == ["the first note", "a second note"]
    # without health's content, a partial run's note comes from summary.json's run facts
    summary["run"] = {"partial": True, "unrecorded_requests": 3, "interrupted": True}
    joined = " ".join(_render(lambda console: render_summary(console, summary)).split())
    assert joined.startswith("partial run: it did not end")
    assert "at least 3 dispatched requests have no row" in joined
    assert "partial run (" not in joined  # (one note, not two)


def test_a_lost_shard_is_said_first_with_what_it_took_with_it() -> None:
    # a distributed run whose shard 1's engine was killed: the figures cover what the shards
    # recorded; the report says which shard, when, and what of it the numbers leave out
    summary = _summary()
    summary["run"] = {
        "interrupted": True,
        "stop_reason": "shard_lost",
        "distributed": {
            "shards": 2,
            "per_shard": [{"index": 0, "lost": None}, {"index": 1, "last_report_s": 3.5091}],
            "lost_shards": {"1": "its engine process was killed (signal 9) before its run ended"},
            "sessions_not_run": 23,
            "requests_lost_in_flight": 1,
            "sessions_incomplete": 1,
        },
    }
    joined = " ".join(_render(lambda console: render_summary(console, summary)).split())
    assert joined.startswith(
        "shard 1 lost (its engine process was killed (signal 9) before its run ended, its "
        "last report at 3.509 s): 1 request in flight is a shard_lost row (outcome "
        "unknown: cut off in flight in the SLOs, not in the throughput), 1 session incomplete, "
        "23 sessions of its never started"
    )
    assert "partial run (" not in joined  # (the note says it)
    assert lost_shards_note({"distributed": {"shards": 2, "lost_shards": {}}}) is None


def test_unfinished_requests_and_carried_over_ones_are_said_at_80_columns() -> None:
    summary = _summary()
    summary["throughput"] = {"window_s": 10.9, "requests_per_s": 16.7, "carried_over_requests": 14}
    slo = {"percentile": 0.99, "threshold": 1.2, "met": False, "samples": 150}
    summary["slos"] = {
        "all_met": False,
        "results": [
            slo
            | {"name": "e2e", "metric": "e2e", "observed": None, "unfinished": 110}
            | {"beyond_finished": True},
            slo | {"name": "ttfc", "metric": "ttfc", "observed": 0.89, "unfinished": 0},
        ],
    }
    text = _render(lambda console: render_summary(console, summary))
    assert max(len(line) for line in text.splitlines()) <= 80
    joined = " ".join(text.split())
    assert "count 14 requests sent before the window opened" in joined
    assert "110 of 150" in joined  # the unfinished column
    assert "0 of 150" in joined
    assert "each counted above every bound" in joined
    e2e_row = next(line for line in text.splitlines() if line.startswith("│ e2e "))
    assert "unfinished" in e2e_row  # the observed value falls among them
    assert "890 ms" in joined
    plain = _summary()  # nothing carried over, no unfinished request: neither is said
    joined = " ".join(_render(lambda console: render_summary(console, plain)).split())
    assert "sent before the window" not in joined
    assert "unfinished" not in joined


def test_a_stopped_runs_headline_says_how_many_were_cancelled_and_cut_in_flight() -> None:
    # Was: "ok 16, requests total 296, error rate 0 %": where the other 280 went was not said
    summary = _summary() | {
        "requests": {"ok": 16, "total": 296, "cancelled": 280, "cancelled_in_flight": 69}
    }
    lines = _render(lambda console: render_summary(console, summary)).splitlines()
    total = next(i for i, line in enumerate(lines) if "requests total" in line)
    assert lines[total + 1].split() == ["│", "cancelled", "│", "280", "(69", "in", "flight)", "│"]
    assert "cancelled" not in _render(lambda console: render_summary(console, _summary()))


def test_a_run_with_images_says_how_many_requests_carried_them() -> None:
    summary = _summary() | {"requests": {"ok": 60, "total": 60, "with_images": 30, "images": 45}}
    lines = _render(lambda console: render_summary(console, summary)).splitlines()
    total = next(i for i, line in enumerate(lines) if "requests total" in line)
    assert lines[total + 1].split() == ["│", "with", "images", "│", "30", "(45", "images)", "│"]
    assert "with images" not in _render(lambda console: render_summary(console, _summary()))


def test_request_counts_count_the_requests_with_images_and_their_images() -> None:
    from tests.unit.evaluate.builders import request, requests_table
    from veeksha.evaluate.metrics import request_counts

    rows = [request(i) for i in range(4)]
    rows[1]["images"], rows[3]["images"] = 2, 1
    counts = request_counts(requests_table(rows))
    assert (counts["with_images"], counts["images"]) == (2, 3)
    assert "images" not in request_counts(requests_table([request(0)]))


def test_an_slo_without_data_is_shown_as_no_data_and_why() -> None:
    # a run stopped during its warmup: nothing measured (was: "unmet", as if it were judged)
    from tests.unit.evaluate.builders import (
        request,
        requests_table,
        scenario,
        session,
        sessions_table,
    )
    from veeksha.evaluate.run import compute_evaluation

    rows = [request(k, ready=0.1 * k, chunks=(0.1 * k + 0.3,), phase="warmup") for k in range(3)]
    sessions = [session(k, 0.1 * k, 0.1 * k + 0.3) for k in range(3)]
    slo = {"name": "ttfc p99", "metric": "ttfc", "percentile": 0.99, "value": 0.5}
    cfg = scenario(
        evaluators=[{"type": "performance", "slos": [slo]}], runtime={"warmup_sessions": 3}
    )
    run = {"interrupted": True, "stop_reason": "interrupted"}
    summary = compute_evaluation(cfg, requests_table(rows), sessions_table(sessions), run).summary
    (result,) = summary["slos"]["results"]  # type: ignore[index]
    assert (result["samples"], result["met"]) == (0, False)  # (slo.json: not met, as documented)
    text = _render(lambda console: render_summary(console, summary))
    assert max(len(line) for line in text.splitlines()) <= 80
    row = next(line for line in text.splitlines() if line.startswith("│ ttfc p99 "))
    assert "no data" in row
    assert "unmet" not in text
    joined = " ".join(text.split())
    assert "no data: no measured request (the run stopped before or during its warmup)" in joined
    assert "an SLO with no data is not met" in joined
    assert "SLOs not met: no data" in joined
    # beside a judged SLO: each shown as it is, the run's SLOs unmet
    summary["slos"]["results"].append(  # type: ignore[index]
        result | {"name": "e2e", "samples": 5, "observed": 0.9}
    )
    summary["requests"]["total"] = 5  # type: ignore[index]
    text = _render(lambda console: render_summary(console, summary))
    joined = " ".join(text.split())
    assert "no data: none of the 5 measured requests has a value of its metric" in joined
    assert next(line for line in text.splitlines() if line.startswith("│ e2e ")).count("unmet")
    assert "SLOs unmet" in joined


def test_answer_ttfc_shows_only_for_a_run_that_has_it() -> None:
    summary = _summary()
    latency = summary["latency"]
    assert isinstance(latency, dict)
    latency["answer_ttfc"] = _stats("s", 0, (None, None, None, None, None, None))  # type: ignore[arg-type]
    text = _render(lambda console: render_summary(console, summary))
    assert "answer" not in text
    latency["answer_ttfc"] = _stats("s", 30, (0.51, 0.5, 0.6, 0.7, 0.71, 0.72))
    text = _render(lambda console: render_summary(console, summary))
    assert "…" not in text
    lines = text.splitlines()
    row = next(line for line in lines if line.lstrip().startswith("answer_ttfc (ms)"))
    assert row.split()[2:5] == ["30", "510", "500"]
    assert any("answer TTFC p50" in line and "500 ms" in line for line in lines)
    assert any("answer TTFC p99" in line and "700 ms" in line for line in lines)


def test_each_scraped_server_has_its_line_under_their_sums() -> None:
    import io

    from rich.console import Console

    from veeksha.evaluate.report import render_summary

    servers = ["http://127.0.0.1:40123/metrics", "http://10.1.2.3:8000/metrics"]
    per_server = [
        {"server": "0", "url": servers[0], "running_peak": 4, "running_mean": 2.5,
         "waiting_peak": 3, "kv_usage_peak": 0.42, "finished": 30.0},
        {"server": "1", "url": servers[1], "running_peak": 1, "running_mean": 0.5,
         "waiting_peak": 0, "kv_usage_peak": None, "finished": 12.0},
    ]  # fmt: skip
    summary = {
        "requests": {"total": 42, "ok": 42},
        "server": {
            "scrapes": 5,
            "running_peak": 5,
            "running_mean": 3.0,
            "finished": 42.0,
            "servers": servers,
            "per_server": per_server,
        },
        "health": {"verdict": "PASS"},
    }
    out = io.StringIO()
    render_summary(Console(file=out, width=80, color_system=None), summary)
    text = out.getvalue()
    assert "2 servers' view (5 scrapes; their sums)" in " ".join(text.split())
    start = text.index("each server")
    lines = [line for line in text[start:].splitlines() if "127.0.0.1" in line or "10.1.2" in line]
    cells = [re.split(r"\s{2,}", line.strip()) for line in lines]  # (a cell's own spaces: 1)
    # (stacked at 80 columns when need be: each table repeats the address)
    rows: dict[str, list[str]] = {}
    for address, *values in cells:
        rows.setdefault(address, []).extend(values)
    assert rows == {
        "127.0.0.1:40123": ["4 / 2.5", "3", "42%", "30"],
        "10.1.2.3:8000": ["1 / 0.5", "0", "-", "12"],
    }
    assert "TTFT mean" not in text  # (no server's histogram: no column)
    assert max(len(line) for line in text.splitlines()) <= 80
