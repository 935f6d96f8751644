"""The terminal report (rich): headline numbers, latency table, a ramp's table of latency against
the offered rate, health verdicts, SLOs (``veeksha compare``'s table: ``veeksha.evaluate.compare``).

Everything is read from a summary.json document (``veeksha.evaluate.summary``), so the report of
a finished run, ``veeksha report`` and ``veeksha compare`` show the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from veeksha.evaluate.group_report import render_groups
from veeksha.evaluate.health import lost_shards_note, partial_note
from veeksha.evaluate.stacked import StackedColumn, print_stacked
from veeksha.plural import counted

__all__ = [
    "ANSWER_HEADLINE",
    "HEADLINE",
    "PHASE_COLUMNS",
    "RAMP_COLUMNS",
    "VERDICT_STYLE",
    "carried_note",
    "has_values",
    "headline_value",
    "number_text",
    "render_summary",
    "slo_cell",
]

#: (label, key path in summary.json, scale, unit shown) of the headline numbers.
HEADLINE: tuple[tuple[str, tuple[str, ...], float, str], ...] = (
    ("ok", ("requests", "ok"), 1, ""),
    ("requests total", ("requests", "total"), 1, ""),
    ("error rate", ("errors", "error_rate"), 100, "%"),
    ("window", ("throughput", "window_s"), 1, "s"),
    ("requests/s", ("throughput", "requests_per_s"), 1, "/s"),
    ("output tokens/s", ("throughput", "output_tokens_per_s"), 1, "/s"),
    ("peak output tokens/s", ("throughput", "peak_output_tokens_per_s"), 1, "/s"),
    ("total tokens/s", ("throughput", "total_tokens_per_s"), 1, "/s"),
    ("peak in flight", ("throughput", "peak_concurrent_requests"), 1, ""),
    ("goodput requests/s", ("goodput", "requests_per_s"), 1, "/s"),
    ("TTFC p50", ("latency", "ttfc", "p50"), 1000, "ms"),
    ("TTFC p99", ("latency", "ttfc", "p99"), 1000, "ms"),
    ("TBC p50", ("latency", "tbc", "p50"), 1000, "ms"),
    ("TBC p99", ("latency", "tbc", "p99"), 1000, "ms"),
    ("TPOT p50", ("latency", "tpot", "p50"), 1000, "ms"),
    ("TPOT p99", ("latency", "tpot", "p99"), 1000, "ms"),
    ("E2E p50", ("latency", "e2e", "p50"), 1000, "ms"),
    ("E2E p99", ("latency", "e2e", "p99"), 1000, "ms"),
    ("generator delay p99", ("latency", "generator_delay", "p99"), 1000, "ms"),
)
#: Latency metrics shown only when the run has values of them: ``answer_ttfc`` (a reasoning
#: model's time to its answer) has none against any other model, and a row of dashes would say
#: nothing. The headline shows its p50 and p99 after TTFC's then.
_ONLY_WITH_DATA = ("answer_ttfc",)
ANSWER_HEADLINE = (
    ("answer TTFC p50", ("latency", "answer_ttfc", "p50"), 1000, "ms"),
    ("answer TTFC p99", ("latency", "answer_ttfc", "p99"), 1000, "ms"),
)
VERDICT_STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}
_LATENCY_COLUMNS = ("mean", "p50", "p90", "p99", "p99_9", "max")
_LABEL_WIDTH = 17  # the longest metric name (output_throughput); a longer label takes two lines


def headline_value(summary: dict[str, Any], path: tuple[str, ...], scale: float) -> float | None:
    """The number at ``path`` of ``summary`` times ``scale``; None when absent."""
    value: Any = summary
    for key in path:
        if not isinstance(value, dict) or value.get(key) is None:
            return None
        value = value[key]
    return float(value) * scale if isinstance(value, int | float) else None


def number_text(value: float | None) -> str:
    """A number in at most 7 characters: 4 significant digits; integers below 10,000 exactly
    (thousands with a comma); from 10,000 on, a k/M/G/T suffix (``12.35k``, ``1.235M``)."""
    if value is None:
        return "-"
    rounded = float(f"{value:.4g}")
    magnitude = abs(rounded)
    if magnitude >= 10_000:
        for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if magnitude >= scale:
                text = f"{value / scale:.4g}"
                return text + suffix if "e" not in text else f"{value:.3g}"
    if magnitude >= 1000 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.4g}"


#: Time units a latency row may be shown in (name, seconds per unit), largest first.
_TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6))


def _display_unit(unit: str, typical: float | None) -> tuple[str, float]:
    """The unit a latency row is shown in, and the factor from its stored unit.

    Rows stored in seconds (``s``, ``s/token``) are shown in the largest of s, ms and µs in
    which their median is at least 1 (µs at the smallest), so a value reads as a few digits
    instead of ``0.0000…``; other units are shown as stored."""
    base, slash, per = unit.partition("/")
    if base != "s":
        return unit, 1.0
    for name, seconds in _TIME_UNITS:
        if typical is not None and abs(typical) >= seconds:
            return name + slash + per, 1 / seconds
    name, seconds = _TIME_UNITS[-1]
    return name + slash + per, 1 / seconds


def _headline_table(summary: dict[str, Any]) -> Table:
    title = "veeksha: measured phases" if summary.get("phases") else "veeksha: measured phase"
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for label, path, scale, unit in HEADLINE:
        value = headline_value(summary, path, scale)
        table.add_row(label, f"{number_text(value)} {unit}".rstrip() if value is not None else "-")
        if label == "requests total" and (cancelled := _cancelled(summary)) is not None:
            table.add_row("cancelled", cancelled)  # (a stopped run: where the others went)
        if label == "requests total" and (abandoned := _abandoned(summary)) is not None:
            table.add_row("abandoned", abandoned)  # (by their users: the scenario's abandonment)
        if label == "requests total" and (images := _with_images(summary)) is not None:
            table.add_row("with images", images)
        if label == "TTFC p99" and has_values(summary, "answer_ttfc"):
            for answer_label, answer_path, answer_scale, answer_unit in ANSWER_HEADLINE:
                value = headline_value(summary, answer_path, answer_scale)
                shown = f"{number_text(value)} {answer_unit}".rstrip() if value is not None else "-"
                table.add_row(answer_label, shown)
    return table


def has_values(summary: dict[str, Any], metric: str) -> bool:
    """Whether ``summary`` has values of the latency ``metric``."""
    stats = (summary.get("latency") or {}).get(metric)
    return isinstance(stats, dict) and bool(stats.get("count"))


def _cancelled(summary: dict[str, Any]) -> str | None:
    """The headline's ``cancelled`` cell, ``280 (75 in flight)``; None when none was."""
    requests = summary.get("requests") or {}
    count = requests.get("cancelled")
    if not isinstance(count, int) or not count:
        return None
    in_flight = requests.get("cancelled_in_flight")
    return number_text(count) + (f" ({number_text(in_flight)} in flight)" if in_flight else "")


def _abandoned(summary: dict[str, Any]) -> str | None:
    """The headline's ``abandoned`` cell, ``16 (20 %)``; None when no request was."""
    requests = summary.get("requests") or {}
    count, total = requests.get("abandoned"), requests.get("total")
    if not isinstance(count, int) or not count or not isinstance(total, int):
        return None
    return f"{number_text(count)} ({number_text(100 * count / total)} %)"


def _with_images(summary: dict[str, Any]) -> str | None:
    """The headline's ``with images`` cell, ``30 (45 images)``; None without the channel."""
    requests = summary.get("requests") or {}
    count, images = requests.get("with_images"), requests.get("images")
    if not isinstance(count, int) or not isinstance(images, int):
        return None
    return f"{number_text(count)} ({number_text(images)} images)"


def _errors_table(summary: dict[str, Any]) -> Table | None:
    """The requests that did not succeed, by kind: count, share of the requests and the first
    message of each (summary.json's ``errors.by_kind``); None when every request succeeded."""
    errors = summary.get("errors") or {}
    by_kind = errors.get("by_kind") or {}
    if not by_kind:
        return None
    total = errors.get("requests")
    title = f"requests that did not succeed (of {number_text(total)})" if total else None
    table = Table(title=title, title_justify="left")
    table.add_column("kind", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)
    table.add_column("share", justify="right", no_wrap=True)
    table.add_column("first message", overflow="fold")
    for kind, entry in by_kind.items():
        rate = entry.get("rate")
        share = "-" if rate is None else f"{number_text(rate * 100)} %"
        example = entry.get("example") or ""
        table.add_row(escape(kind), number_text(entry.get("count")), share, escape(example))
    return table


def _latency_table(summary: dict[str, Any]) -> Table:
    """One row per metric; its unit under its name (it fits 80 columns whole: see
    ``number_text``)."""
    table = Table(
        title="latency (ok requests)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    table.add_column("metric (unit)", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)
    for name in _LATENCY_COLUMNS:
        table.add_column(name.replace("_", "."), justify="right", no_wrap=True)
    for name, stats in summary.get("latency", {}).items():
        if name in _ONLY_WITH_DATA and not stats.get("count"):
            continue
        unit, scale = _display_unit(stats["unit"], stats.get("p50"))
        cells = [
            number_text(None if stats.get(c) is None else stats[c] * scale)
            for c in _LATENCY_COLUMNS
        ]
        label = f"{name} ({unit})"
        if len(label) > _LABEL_WIDTH:
            label = f"{name}\n  ({unit})"
        table.add_row(label, number_text(stats["count"]), *cells)
    return table


def _health_table(health: dict[str, Any]) -> Table:
    verdict = health.get("verdict", "SKIP")
    title = f"health checks: [{VERDICT_STYLE.get(verdict, '')}]{verdict}[/]"
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    for check in health.get("checks", []):
        status = check["status"]
        table.add_row(check["name"], f"[{VERDICT_STYLE[status]}]{status}[/]", check["detail"])
    return table


_SERVER_ROWS = (
    ("running (peak / mean)", "running_peak", "running_mean", ""),
    ("waiting (peak / mean)", "waiting_peak", "waiting_mean", ""),
    ("KV cache usage (peak)", "kv_usage_peak", None, "%"),
    ("prefix-cache hit rate", "prefix_hit_rate", None, "%"),
    ("preemptions", "preemptions", None, ""),
    ("requests finished", "finished", None, ""),
    ("spec-decode acceptance rate", "spec_acceptance_rate", None, "%"),
    ("spec-decode acceptance length", "spec_acceptance_length", None, ""),
)


def _server_table(server: dict[str, Any], gpus: bool = False) -> Table:
    """The server's own view (summary.json's ``server``): its queue, KV cache, prefix cache;
    its GPUs' peaks unless ``gpus`` (summary.json has a ``gpus`` section: a table of its own)."""
    scrapes = counted(server.get("scrapes", 0), "scrape")
    title = f"server's view ({scrapes})"  # (as its table)
    if server.get("servers"):  # (every server of the clients: their sums)
        title = f"{len(server['servers'])} servers' view ({scrapes}; their sums)"
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for label, key, mean_key, unit in _SERVER_ROWS:
        value = server.get(key)
        if value is None:
            continue
        scale = 100.0 if unit == "%" else 1.0
        text = f"{number_text(value * scale)}{unit}"
        if mean_key is not None and server.get(mean_key) is not None:
            text += f" / {number_text(server[mean_key])}"
        table.add_row(label, text)
    peaks = {} if gpus else server  # (with a gpus section the GPUs have a table of their own)
    for key, value in peaks.items():
        if key.endswith("_peak") and "_gpu" in key and value is not None:
            table.add_row(
                f"{key.removesuffix('_peak').replace('_', ' ')} (peak)", number_text(value)
            )
    return table


_GPU_ROWS = (
    ("utilisation (mean)", "utilization_mean", "%"),
    ("power (mean, together)", "power_mean_w", " W"),
    ("energy per output token", "joules_per_output_token", " J"),
    ("output tokens per joule", "output_tokens_per_joule", ""),
    ("energy per request", "joules_per_request", " J"),
    ("output tokens/s per GPU", "output_tokens_per_s_per_gpu", "/s"),
)
_GPU_LINES = 8  # GPUs shown one a row; more: the totals only (summary.json has each)


def _gpu_table(gpus: dict[str, Any]) -> Table:
    """The GPUs during the window (summary.json's ``gpus``): use, power, energy per token."""
    title = f"GPUs ({gpus.get('count')}, {gpus.get('source')})"
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    energy = gpus.get("energy_j")
    if energy is not None:
        table.add_row(
            "energy", f"{number_text(energy)} J in {number_text(gpus.get('covered_s'))} s"
        )
    for label, key, unit in _GPU_ROWS:
        if gpus.get(key) is not None:
            table.add_row(label, f"{number_text(gpus[key])}{unit}")
    per_gpu = gpus.get("per_gpu") or []
    if 1 < len(per_gpu) <= _GPU_LINES:
        for gpu in per_gpu:
            parts = [
                f"{number_text(gpu[key])}{unit}"
                for key, unit in (
                    ("utilization_mean", "%"),
                    ("power_mean_w", " W"),
                    ("energy_j", " J"),
                )
                if gpu.get(key) is not None
            ]
            table.add_row(f"GPU {gpu.get('gpu')}", " · ".join(parts) or "-")
    return table


#: (label, the server's latency key, veeksha's metric beside it or None)
_SERVER_LATENCY_ROWS = (
    ("TTFT / TTFC", "ttft", "ttfc"),
    ("E2E", "e2e", "e2e"),
    ("queued", "queue", None),
    ("prefill", "prefill", None),
    ("decode", "decode", None),
    ("ITL / TBC", "itl", "tbc"),
)


def _server_latency_table(summary: dict[str, Any]) -> Table | None:
    """The server's latency from its histograms (summary.json's ``server.latency``), beside
    veeksha's own: what the network, the server's HTTP layer and the client add is the
    difference of the means (the server's quantiles are as fine as its buckets). Without
    veeksha's column when the clients are on several servers (its rows are not all this
    server's)."""
    server = summary.get("server") or {}
    latency = server.get("latency") or {}
    if not latency:
        return None
    ours = (summary.get("latency") or {}) if server.get("clients") is None else {}
    table = Table(title="server's latency (ms; its histograms)", title_justify="left")
    for name in ("", "mean", "p50", "p99", "veeksha mean", "difference"):
        table.add_column(name, justify="left" if not name else "right")
    for label, key, mine in _SERVER_LATENCY_ROWS:
        theirs = latency.get(key)
        if theirs is None:
            continue
        own = (ours.get(mine) or {}).get("mean") if mine else None
        cells = [number_text(theirs["mean"] * 1000)]
        cells += [_bucketed(theirs.get(q), theirs.get(f"{q}_bucket")) for q in ("p50", "p99")]
        difference = None if own is None else (own - theirs["mean"]) * 1000
        shown = "-" if difference is None else f"{difference:+.3g}"
        table.add_row(label, *cells, number_text(None if own is None else own * 1000), shown)
    return table


def _bucketed(estimate: float | None, bucket: list[float] | None) -> str:
    """A quantile of a server's histogram in ms: its estimate, or ``<300`` when its bucket is
    the first one (from 0: the estimate would be a guess at its middle)."""
    if estimate is None:
        return "-"
    if bucket and bucket[0] == 0:
        return f"<{number_text(bucket[1] * 1000)}"
    return number_text(estimate * 1000)


def _exporter_notes(scraper: dict[str, Any]) -> list[str]:
    """What the console says of the scraped addresses whose scrapes failed: the GPU exporters
    (``server_metrics.gpu_urls``) and the servers after the first (the first's failures have
    their own note): how many, and the first failure."""
    accounts = [("server metrics", a) for a in (scraper.get("servers") or [])[1:]]
    accounts += [("GPU metrics", a) for a in scraper.get("gpu_exporters") or []]
    notes = []
    for what, account in accounts:
        failed, tries = account.get("failed"), account.get("scrapes")
        if failed:
            notes.append(
                f"{what}: {failed} of {counted(tries, 'scrape')} of {account.get('url')} "
                f"failed, the first: {account.get('error') or 'no reason given'}"
            )
    return notes


def _print_per_server(console: Console, server: dict[str, Any]) -> None:
    """Each scraped server's own numbers (summary.json's ``server.per_server``), beside the
    servers' sums: an imbalance between replicas, or one slower than the others (its TTFT
    histogram's mean), shows here. Stacked (``veeksha.evaluate.stacked``): at any width each
    address and number stays whole."""
    entries = server.get("per_server") or []
    addresses = [
        str(entry.get("url") or entry.get("server")).split("://", 1)[-1].removesuffix("/metrics")
        for entry in entries
    ]
    kv = [entry.get("kv_usage_peak") for entry in entries]
    columns = [
        StackedColumn(
            "running peak / mean",
            [
                f"{number_text(e.get('running_peak'))} / {number_text(e.get('running_mean'))}"
                for e in entries
            ],
        ),
        StackedColumn("waiting peak", [number_text(e.get("waiting_peak")) for e in entries]),
        StackedColumn("KV peak", ["-" if k is None else f"{number_text(k * 100)}%" for k in kv]),
        StackedColumn("finished", [number_text(e.get("finished")) for e in entries]),
    ]
    ttft = [(entry.get("latency") or {}).get("ttft") for entry in entries]
    if any(ttft):
        cells = ["-" if not t else f"{number_text(t['mean'] * 1e3)} ms" for t in ttft]
        columns.append(StackedColumn("TTFT mean", cells))
    print_stacked(console, "each server", StackedColumn("server", addresses, "left"), columns)


def _clients_note(clients: list[str]) -> str:
    """What the console says above the server's view when the clients are on several servers
    and its metrics are one server's (summary.json's ``server.clients``)."""
    if not clients:
        return "server's view: the metrics scraped are of none of the clients' servers"
    return (
        f"server's view: the server of client{'s' if len(clients) > 1 else ''} "
        f"{', '.join(clients)} only (the other clients' servers were not scraped)"
    )


def _unknown_note(server: dict[str, Any]) -> str:
    """What the console says of scrapes that hold none of the metrics veeksha reads."""
    scrapes = counted(server.get("scrapes", 0), "scrape")
    return (
        f"server metrics: {scrapes}, none holding a metric veeksha reads "
        "(running, waiting, KV cache, prefix cache, preemptions, finished requests under "
        "vLLM's, SGLang's, llama.cpp's or TGI's names: docs/server.md); what the server "
        "exports is in server_metrics.parquet"
    )


def _scrape_note(server: dict[str, Any], scraper: dict[str, Any]) -> str | None:
    """What the console says of the server's metrics when scrapes failed (None: they did not),
    from summary.json's ``server`` section and the scraper's account (``run.server_metrics``):
    that none could be scraped, and why (the first failure), in place of an empty "server's
    view"; or how many of them failed beside the view of the others."""
    error = scraper.get("error") or "no reason given"
    tries, failed = scraper.get("scrapes"), scraper.get("failed")
    failures = (
        f"{failed} of {counted(tries, 'scrape')} failed" if tries is not None and failed else None
    )
    if not server.get("scrapes") and scraper.get("status") == "failed":
        how = f" ({failures})" if failures else ""
        return (
            f"server metrics could not be scraped{how}: {error}; the server's view is left "
            "out (set server_metrics.url, or server_metrics.enabled: false)"
        )
    if failures is not None:
        return f"server metrics: {failures}, the first: {error}; the view is of the others"
    return None


def carried_note(summary: dict[str, Any]) -> str | None:
    """The line under the headline when the rates count requests sent before the window."""
    carried = (summary.get("throughput") or {}).get("carried_over_requests")
    if not carried:
        return None
    return (
        f"requests/s and tokens/s count {counted(carried, 'request')} sent before the window "
        "opened (the warmup's, an earlier phase's) and served inside it: docs/metrics.md, "
        "Throughput"
    )


def _slo_observed(slo: dict[str, Any]) -> str:
    if slo.get("beyond_finished"):  # the quantile falls among requests that never finished
        return "unfinished"
    observed = slo["observed"]
    return "-" if observed is None else f"{observed * 1000:.4g} ms"


def _slo_table(slos: Sequence[dict[str, Any]]) -> Table:
    table = Table(title="SLOs", title_justify="left")
    unfinished = any(slo.get("unfinished") for slo in slos)
    names = ("slo", "metric", "observed", "threshold", "met")
    for name in (*names, "unfinished") if unfinished else names:
        table.add_column(name, overflow="fold", no_wrap=name != "slo")
    for slo in slos:
        if slo["met"]:
            met = "[green]met[/]"
        elif not slo.get("samples"):  # not met, for want of a value: said so, and why below
            met = "[yellow]no data[/]"
        else:
            met = "[bold red]unmet[/]"
        cells = [
            slo["name"],
            f"{slo['metric']} p{slo['percentile'] * 100:g}",
            _slo_observed(slo),
            f"{slo['threshold'] * 1000:.4g} ms",
            met,
        ]
        if unfinished:
            cells.append(f"{slo.get('unfinished') or 0} of {slo['samples']}")
        table.add_row(*cells)
    return table


def _slo_unfinished_note(slos: Sequence[dict[str, Any]]) -> str | None:
    """The line under the SLO table when requests that never finished were judged."""
    if not any(slo.get("unfinished") for slo in slos):
        return None
    return (
        "unfinished: requests that failed or timed out without the metric (for TTFC: without "
        "a first chunk), or were cut off in flight after more than the bound, each counted "
        "above every bound; "
        "'unfinished' as observed: the percentile falls among them"
    )


def _slo_no_data_note(slos: Sequence[dict[str, Any]], measured: int) -> str | None:
    """The line under the SLO table when an SLO had no value to judge (``measured``: the
    measured requests recorded)."""
    if all(slo["met"] or slo.get("samples") for slo in slos):
        return None
    why = (
        "no measured request (the run stopped before or during its warmup)"
        if measured == 0
        else f"none of the {measured} measured requests has a value of its metric"
    )
    return f"no data: {why}; an SLO with no data is not met (slo.json: met false)"


#: (column, key path in a phase's section, scale, unit) of the per-phase table.
PHASE_COLUMNS: tuple[tuple[str, tuple[str, ...], float, str], ...] = (
    ("ok", ("requests", "ok"), 1, ""),
    ("req/s", ("throughput", "requests_per_s"), 1, ""),
    ("TTFC p99", ("latency", "ttfc", "p99"), 1000, ""),
    ("E2E p99", ("latency", "e2e", "p99"), 1000, ""),
)


def _phase_table(phases: dict[str, Any]) -> Table:
    """One row per measured phase: its start (and drain), requests, rate, latency, health and
    SLOs."""
    table = Table(
        title="phases (ok: requests; times in s, latency in ms)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("phase", overflow="fold", min_width=7)
    table.add_column("from", justify="right", no_wrap=True)
    for label, _, _, unit in PHASE_COLUMNS:
        table.add_column(f"{label} {unit}".rstrip(), justify="right", no_wrap=True)
    table.add_column("health", no_wrap=True, min_width=6)
    table.add_column("SLOs", no_wrap=True, min_width=5)
    for name, section in phases.items():
        window = section.get("window") or {}
        span = "-" if window.get("start") is None else f"{window['start']:.1f}"
        label = name
        if window.get("drain_s"):
            label += f"\n(drain {window['drain_s']:.1f})"
        cells = [
            number_text(headline_value(section, path, scale)) for _, path, scale, _ in PHASE_COLUMNS
        ]
        verdict = section.get("health", {}).get("verdict", "SKIP")
        table.add_row(
            label,
            span,
            *cells,
            f"[{VERDICT_STYLE.get(verdict, '')}]{verdict}[/]",
            slo_cell(section),
        )
    return table


def slo_cell(section: dict[str, Any]) -> str:
    """A phase's SLO cell: met, unmet, or "no data" when every unmet SLO had no sample (the
    phase measured nothing: slo.json says not met, as for the whole run)."""
    slos = section.get("slos", {})
    met = slos.get("all_met")
    if met is None:
        return "-"
    if met:
        return "[green]met[/]"
    results = slos.get("results", [])
    if results and _unmet_for_want_of_data(results):
        return "[yellow]no\ndata[/]"
    return "[bold red]unmet[/]"


def _unmet_for_want_of_data(results: Sequence[dict[str, Any]]) -> bool:
    """Whether every SLO not met had no sample (slo.json: met false, samples 0)."""
    return all(result.get("met") or not result.get("samples") for result in results)


#: (column, key of a ramp window, scale) of the ramp table: rates per s, latency in ms.
RAMP_COLUMNS: tuple[tuple[str, str, float], ...] = (
    ("offered", "offered_rate", 1),
    ("started", "sessions_per_s", 1),
    ("req/s", "requests_per_s", 1),
    ("TTFC p50", "ttfc_p50", 1000),
    ("TTFC p99", "ttfc_p99", 1000),
    ("E2E p50", "e2e_p50", 1000),
    ("E2E p99", "e2e_p99", 1000),
)


def _ramp_table(ramp: dict[str, Any]) -> Table:
    """One row per window of session starts: offered and achieved rates, latency."""
    title = (
        f"ramp {number_text(ramp.get('start_rate'))} → {number_text(ramp.get('end_rate'))}/s,"
        f" {ramp.get('shape')} (from: s; rates /s; latency ms)"
    )
    return _windows_table(title, RAMP_COLUMNS, ramp.get("windows", []))


def _windows_table(
    title: str,
    columns: tuple[tuple[str, str, float], ...],
    windows: list[dict[str, Any]],
    caption: str | None = None,
) -> Table:
    """A row per window of time (``start``, s), a cell per ``columns`` (label, key, scale)."""
    table = Table(
        title=title,
        title_justify="left",
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("from", justify="right", no_wrap=True)
    for label, _, _ in columns:
        table.add_column(label, justify="right", no_wrap=True)
    for window in windows:
        cells = [
            number_text(None if window.get(key) is None else window[key] * scale)
            for _, key, scale in columns
        ]
        table.add_row(f"{window['start']:.1f}", *cells)
    return table


TIMESLICE_COLUMNS: tuple[tuple[str, str, float], ...] = (
    ("ok", "ok", 1),
    ("failed", "failed", 1),
    ("req/s", "requests_per_s", 1),
    ("tok/s", "output_tokens_per_s", 1),
    ("TTFC p50", "ttfc_p50", 1000),
    ("TTFC p99", "ttfc_p99", 1000),
    ("TPOT p50", "tpot_p50", 1000),
    ("E2E p99", "e2e_p99", 1000),
)
#: The most slices the report shows; a run with more shows this many, evenly spaced.
TIMESLICE_ROWS = 24


def _timeslice_table(section: dict[str, Any]) -> Table:
    """One row per time slice (at most ``TIMESLICE_ROWS``): what completed in it, and its
    latency."""
    slices = section.get("slices") or []
    shown = slices
    title = f"time slices of {number_text(section.get('slice_seconds'))} s (from: s; latency ms)"
    caption = None
    if len(slices) > TIMESLICE_ROWS:
        last = len(slices) - 1
        picks = sorted({round(i * last / (TIMESLICE_ROWS - 1)) for i in range(TIMESLICE_ROWS)})
        shown = [slices[i] for i in picks]
        caption = f"{len(shown)} of {len(slices)} shown; all in metrics/timeslices.csv"
    return _windows_table(title, TIMESLICE_COLUMNS, shown, caption)


def stream_note(run: dict[str, Any]) -> str | None:
    """One line when the run's requests (or some clients') were not streamed, so TTFC equal to
    E2E and the absent TBC and TPOT are explained (``run.not_streamed``: the clients' names)."""
    names = run.get("not_streamed")
    if not names:
        return None
    whose = "" if names == ["default"] else f" (clients {', '.join(names)})"
    return (
        f"not streamed{whose}, client.stream: false: TTFC is the whole answer's time "
        "(= E2E), and TBC and TPOT have no values"
    )


def render_summary(
    console: Console, summary: dict[str, Any], health: dict[str, Any] | None = None
) -> None:
    """Print the report of one run (``health``: health.json's content, for the details; its
    ``notes`` lead the report)."""
    run = summary.get("run", {})
    # health's notes (what the reader must know of the run itself), as health.txt leads with
    # them; without health.json's content, the notes summary.json's run facts give
    notes = list((health or {}).get("notes") or [])
    if not notes:
        notes = [note for note in (partial_note(run), lost_shards_note(run)) if note]
    for note in notes:
        console.print(f"[yellow]{escape(str(note))}[/]")
    if not notes and run.get("interrupted"):
        reason = run.get("stop_reason") or "interrupted"
        console.print(f"[yellow]partial run ({reason}): numbers cover what was recorded[/]")
    console.print(_headline_table(summary))
    note = carried_note(summary)
    if note is not None:
        console.print(escape(note))
    note = stream_note(run)
    if note is not None:
        console.print(escape(note))
    errors = _errors_table(summary)
    if errors is not None:
        console.print(errors)
    console.print(_latency_table(summary))
    if summary.get("phases"):
        console.print(_phase_table(summary["phases"]))
    if summary.get("ramp"):
        console.print(_ramp_table(summary["ramp"]))
    if summary.get("timeslices"):
        console.print(_timeslice_table(summary["timeslices"]))
    render_groups(console, summary)
    server = summary.get("server") or {}
    note = _scrape_note(server, run.get("server_metrics") or {})
    if note is not None:
        console.print(f"[yellow]{escape(note)}[/]")
    if server.get("scrapes"):
        table = _server_table(server, gpus=bool(summary.get("gpus")))
        if table.row_count:
            if server.get("clients") is not None:  # (the clients are on several servers)
                console.print(escape(_clients_note(server["clients"])))
            console.print(table)
            if server.get("per_server"):
                _print_per_server(console, server)
        else:  # (a server whose page holds none of the names veeksha reads: no empty table)
            console.print(f"[yellow]{escape(_unknown_note(server))}[/]")
    latency = _server_latency_table(summary)
    if latency is not None:
        console.print(latency)
    for note in _exporter_notes(run.get("server_metrics") or {}):
        console.print(f"[yellow]{escape(note)}[/]")
    if summary.get("gpus"):
        console.print(_gpu_table(summary["gpus"]))
    console.print(_health_table(health or _checks_from_summary(summary)))
    slos = summary.get("slos", {}).get("results", [])
    if slos:
        console.print(_slo_table(slos))
        for note in (
            _slo_unfinished_note(slos),
            _slo_no_data_note(slos, summary.get("requests", {}).get("total") or 0),
        ):
            if note is not None:
                console.print(escape(note))
        met = summary["slos"]["all_met"]
        if met:
            console.print("all SLOs met")
        elif _unmet_for_want_of_data(slos):
            console.print("[yellow]SLOs not met: no data[/]")
        else:
            console.print("[bold red]SLOs unmet[/]")


def _checks_from_summary(summary: dict[str, Any]) -> dict[str, Any]:
    health = summary.get("health", {})
    checks = [
        {"name": name, "status": status, "detail": ""}
        for name, status in health.get("checks", {}).items()
    ]
    return {"verdict": health.get("verdict", "SKIP"), "checks": checks}
