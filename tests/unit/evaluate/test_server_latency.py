"""The server's latency from its Prometheus histograms: the increase over the run of each bucket
(a reset read as one), the exact mean, quantiles as Prometheus estimates them with the bucket
that holds them, and the report's table beside veeksha's own means."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from rich.console import Console

from veeksha.evaluate.report import render_summary
from veeksha.evaluate.server_latency import histogram_quantile
from veeksha.evaluate.server_view import load_server_view
from veeksha.record.server_metrics import ServerMetricsWriter
from veeksha.server.scraper import parse_metrics, with_server_label


def test_a_quantile_is_interpolated_in_the_bucket_that_holds_its_rank() -> None:
    buckets = [(0.1, 10.0), (0.2, 30.0), (math.inf, 40.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx((0.15, 0.1, 0.2))
    assert histogram_quantile(0.05, buckets) == pytest.approx((0.02, 0.0, 0.1))
    assert histogram_quantile(0.95, buckets) == (0.2, 0.2, math.inf)  # (+Inf: the last bound)
    assert histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None


def _page(model: str, counts: tuple[int, int, int], total: float) -> str:
    """A vLLM TTFT histogram of one model: cumulative counts at le 0.05, 0.1, +Inf."""
    lines = ["# TYPE vllm:time_to_first_token_seconds histogram"]
    for le, n in zip(("0.05", "0.1", "+Inf"), counts, strict=True):
        lines.append(
            f'vllm:time_to_first_token_seconds_bucket{{le="{le}",model_name="{model}"}} {n}'
        )
    lines.append(f'vllm:time_to_first_token_seconds_sum{{model_name="{model}"}} {total}')
    lines.append(f'vllm:time_to_first_token_seconds_count{{model_name="{model}"}} {counts[-1]}')
    return "\n".join(lines) + "\n"


def test_the_runs_increase_of_each_bucket_over_the_models_and_a_reset(tmp_path: Path) -> None:
    writer = ServerMetricsWriter(tmp_path, {})
    pages = [
        _page("a", (5, 8, 10), 0.6),  # before t0: 10 finished before the run
        _page("a", (9, 20, 24), 1.7) + _page("b", (1, 1, 2), 0.2),  # b: its first requests
        _page("a", (2, 3, 3), 0.2) + _page("b", (3, 5, 6), 0.5),  # a restarted (reset)
    ]
    for t, page in zip((-0.1, 1.0, 2.0), pages, strict=True):
        writer.add(t, parse_metrics(page))
    writer.close({})
    view = load_server_view(tmp_path)
    assert view is not None
    ttft = view.section()["latency"]["ttft"]
    # a: 14 then 3 after its reset (17, sum 1.1 + 0.2); b: 6 from 0 (sum 0.5)
    assert ttft["count"] == 17 + 6
    assert ttft["mean"] == pytest.approx((1.1 + 0.2 + 0.5) / 23)
    # buckets: le 0.05: a 4 + 2, b 3 → 9; le 0.1: a 12 + 3, b 5 → 20; +Inf: 23
    assert ttft["p50_bucket"] == [0.05, 0.1]
    assert ttft["p50"] == pytest.approx(0.05 + 0.05 * (11.5 - 9) / (20 - 9))
    assert ttft["p99_bucket"] == [0.1, math.inf]
    assert ttft["metric"] == "vllm:time_to_first_token_seconds"
    assert "e2e" not in view.section()["latency"]


def test_each_scraped_servers_own_latency_beside_their_sum(tmp_path: Path) -> None:
    writer = ServerMetricsWriter(tmp_path, {})
    running = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
    rounds = [  # (server 0 slow: its TTFTs above 0.1 s; server 1 fast: below 0.05 s)
        (_page("m", (0, 0, 0), 0.0), _page("m", (0, 0, 0), 0.0)),
        (_page("m", (0, 0, 4), 0.8), _page("m", (6, 6, 6), 0.12)),
    ]
    for t, pages in zip((0.0, 1.0), rounds, strict=True):
        samples = []
        for number, page in enumerate(pages):
            samples += with_server_label(parse_metrics(running + page), number)
        writer.add(t, samples)
    writer.close({})
    view = load_server_view(tmp_path)
    assert view is not None
    section = view.section()
    total = section["latency"]["ttft"]
    assert (total["count"], total["mean"]) == (10, pytest.approx(0.92 / 10))
    slow, fast = (entry["latency"]["ttft"] for entry in section["per_server"])
    assert [entry["server"] for entry in section["per_server"]] == ["0", "1"]
    assert (slow["count"], slow["mean"], slow["p50_bucket"]) == (4, 0.2, [0.1, math.inf])
    assert (fast["count"], fast["mean"], fast["p50_bucket"]) == (6, 0.02, [0.0, 0.05])
    out = io.StringIO()  # the report's line of each server: its TTFT mean beside its counts
    render_summary(Console(file=out, width=80, color_system=None), {"server": section})
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    lines = text[text.index("each server") :].splitlines()
    own = [line.split() for line in lines if line.split()[:1] in (["0"], ["1"])]
    assert lines[2].split()[-2:] == ["TTFT", "mean"]  # (one table: the short keys fit)
    assert [cells[-2:] for cells in own] == [["200", "ms"], ["20", "ms"]]


def _summary(clients: list[str] | None) -> dict[str, object]:
    server: dict[str, object] = {
        "scrapes": 3,
        "running_peak": 1,
        "latency": {
            "ttft": {"count": 9, "mean": 0.045, "p50": 0.042, "p50_bucket": [0.04, 0.06],
                     "p99": 0.07, "p99_bucket": [0.06, 0.08]},
            "queue": {"count": 9, "mean": 0.004, "p50": 0.15, "p50_bucket": [0.0, 0.3],
                      "p99": 0.297, "p99_bucket": [0.0, 0.3]},
        },
    }  # fmt: skip
    if clients is not None:
        server["clients"] = clients
    return {
        "requests": {"total": 9, "ok": 9},
        "latency": {"ttfc": {"mean": 0.0462, "p50": 0.044, "p99": 0.071, "count": 9, "unit": "s"}},
        "server": server,
        "health": {"verdict": "PASS"},
    }


def test_the_report_sets_the_servers_means_beside_veekshas(tmp_path: Path) -> None:
    out = io.StringIO()
    render_summary(Console(file=out, width=80, color_system=None), _summary(None))
    text = out.getvalue()
    assert "server's latency (ms; its histograms)" in text
    ttft = next(line for line in text.splitlines() if "TTFT / TTFC" in line)
    cells = [cell.strip() for cell in ttft.split("│")[1:-1]]
    assert cells == ["TTFT / TTFC", "45", "42", "70", "46.2", "+1.2"]
    queued = next(line for line in text.splitlines() if "queued" in line)
    assert [cell.strip() for cell in queued.split("│")[1:-1]] == [
        "queued",
        "4",
        "<300",
        "<300",
        "-",
        "-",
    ]
    assert max(len(line) for line in text.splitlines()) <= 80
    out = io.StringIO()  # clients on several servers: the server's figures alone
    render_summary(Console(file=out, width=80, color_system=None), _summary(["a"]))
    ttft = next(line for line in out.getvalue().splitlines() if "TTFT / TTFC" in line)
    assert [cell.strip() for cell in ttft.split("│")[1:-1]][-2:] == ["-", "-"]
