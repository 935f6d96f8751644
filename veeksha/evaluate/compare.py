"""``veeksha compare`` of run folders: the headline numbers side by side, and what makes them
comparable or not.

Each run after the first shows its change relative to the first, ``(value − first) / |first|``,
coloured by what is better for that metric (green: higher throughput, lower latency or error
rate; red: the reverse; counts and the window are neither). Beside the numbers it says what a
reader must know before trusting a change:

- first, when any run has them, the scenarios' ``labels`` (summary.json's ``run.labels``: the
  engine, the GPU, ...), each run's value side by side;
- how each run ended (``completed``, ``timeout``, ``interrupted``, ``killed``: a partial run's
  folder, its end never written), with the partial run's note; a run not streamed (its TTFC is
  the whole answer's time, it has no TBC or TPOT) says so;
- each SLO (by metric, percentile and bound) with each run's observed value and verdict; a run
  whose SLOs are not the first run's gets no change of goodput (it counts other work);
- the keys in which a run's scenario (its config.yaml) differs from the first's;
- for runs with ``phases:``, each phase side by side (matched by name), as the headline numbers
  are over all the measured phases together;
- for runs whose server's metrics were scraped (``server_metrics``), the server's view side by
  side: its queue, KV cache, prefix cache, preemptions, a speculative decoder's acceptance and
  the means of its own latency histograms; with several servers scraped, each server's line
  under their sums (matched by the server's number: its place among the run's servers), where
  a slower replica shows.

Columns are headed by the run folders' names when they fit the console's width whole; otherwise
by letters, A for the first, with a legend above the table naming each folder in full.

Worked example: TTFC p99 41.23 ms in A and 43.1 ms in B reads ``43.1 ms (+4.5%)`` in red in B's
column (B is slower); requests/s 5.55 and 5.49 reads ``5.49 /s (-1.1%)``, also red.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from veeksha.evaluate.health import lost_shards_note, partial_note
from veeksha.evaluate.report import (
    ANSWER_HEADLINE,
    HEADLINE,
    VERDICT_STYLE,
    has_values,
    headline_value,
    number_text,
    slo_cell,
    stream_note,
)

__all__ = [
    "ComparedRun",
    "differences_note",
    "dotted",
    "ended",
    "ending_notes",
    "read_scenario",
    "render_compare",
    "scenario_differences",
    "slo_key",
    "slo_label",
    "slo_results",
    "slo_verdict",
]

#: Direction of the headline metrics: +1 higher is better, -1 lower is better (latency and
#: error rate); metrics not listed (counts, the window) have none.
_BETTER: dict[str, int] = {
    "error rate": -1,
    "requests/s": 1,
    "output tokens/s": 1,
    "peak output tokens/s": 1,
    "total tokens/s": 1,
    "goodput requests/s": 1,
    "energy / output token": -1,
}
#: (label, key path, scale, unit) of the GPUs' rows, when a run has summary.json's ``gpus``
_GPU_ROWS: tuple[tuple[str, tuple[str, ...], float, str], ...] = (
    ("energy / output token", ("gpus", "joules_per_output_token"), 1, "J"),
    ("GPU power (mean)", ("gpus", "power_mean_w"), 1, "W"),
    ("GPU utilisation", ("gpus", "utilization_mean"), 1, "%"),
)
#: (label, key path in a phase's section, scale, unit) of the per-phase comparison.
_PHASE_ROWS: tuple[tuple[str, tuple[str, ...], float, str], ...] = (
    ("requests/s", ("throughput", "requests_per_s"), 1, "/s"),
    ("TTFC p99", ("latency", "ttfc", "p99"), 1000, "ms"),
    ("TPOT p99", ("latency", "tpot", "p99"), 1000, "ms"),
    ("E2E p99", ("latency", "e2e", "p99"), 1000, "ms"),
    ("error rate", ("errors", "error_rate"), 100, "%"),
)
#: (label, key in summary.json's ``server`` (or a ``per_server`` entry), scale, unit, direction)
#: of the server's view: lower is better for a queue and preemptions, higher for a cache's hits
_SERVER_ROWS: tuple[tuple[str, str, float, str, int], ...] = (
    ("running (mean)", "running_mean", 1, "", 0),
    ("running (peak)", "running_peak", 1, "", 0),
    ("waiting (mean)", "waiting_mean", 1, "", -1),
    ("waiting (peak)", "waiting_peak", 1, "", -1),
    ("KV cache usage (peak)", "kv_usage_peak", 100, "%", 0),
    ("prefix-cache hit rate", "prefix_hit_rate", 100, "%", 1),
    ("preemptions", "preemptions", 1, "", -1),
    ("requests finished", "finished", 1, "", 0),
    ("spec-decode acceptance rate", "spec_acceptance_rate", 100, "%", 1),
    ("spec-decode acceptance length", "spec_acceptance_length", 1, "", 1),
)
#: (label, the server's latency histogram) compared by their means (ms): a quantile of a
#: histogram is only as fine as its buckets, too coarse to read a change from
_SERVER_LATENCY_ROWS = (
    ("TTFT mean", "ttft"),
    ("E2E mean", "e2e"),
    ("queued mean", "queue"),
    ("prefill mean", "prefill"),
    ("decode mean", "decode"),
    ("ITL mean", "itl"),
)
#: each server's own lines, with several servers scraped
_PER_SERVER_ROWS = (
    "running (mean)",
    "waiting (peak)",
    "KV cache usage (peak)",
    "requests finished",
)
_SHOWN_DIFFERENCES = 6  # scenario keys named per run; the rest are counted


@dataclass(frozen=True)
class ComparedRun:
    """One run of a comparison: its folder's name, its summary.json document and its scenario
    as config.yaml holds it (a plain mapping; None when unknown)."""

    name: str
    summary: dict[str, Any]
    scenario: Mapping[str, Any] | None = field(default=None)


def _direction(label: str) -> int:
    if label in _BETTER:
        return _BETTER[label]
    return -1 if label.endswith(("p50", "p99")) else 0  # (latencies, generator delay)


def _change(base: float | None, value: float | None, direction: int) -> str:
    """`` (+4.5%)`` coloured by ``direction`` (empty when either value is missing; ``(new)``
    from 0, coloured by its sign)."""
    if base is None or value is None:
        return ""
    if value == base:
        return "" if base == 0 else " (+0.0%)"
    if base == 0:
        text, better = "(new)", value * direction > 0
    else:
        change = (value - base) / abs(base)
        text, better = f"({change:+.1%})", change * direction > 0
    if direction == 0:
        return f" {text}"
    return f" [{'green' if better else 'red'}]{text}[/]"


def _requests(summary: Mapping[str, Any], status: str) -> int:
    """The measured requests of a run with ``status``: ``cancelled`` (never sent, or cut in
    flight by its stop), ``abandoned`` (by their users); 0 when summary.json does not say."""
    count = (summary.get("requests") or {}).get(status)
    return count if isinstance(count, int) else 0


def _cell(value: float | None, unit: str) -> str:
    return f"{number_text(value)} {unit}".rstrip() if value is not None else "-"


def _compared(
    label: str, values: Sequence[float | None], unit: str, direction: int | None = None
) -> list[str]:
    """A row's cells: the first run's value, then each other's with its change from it
    (coloured by ``direction``, else by the label's)."""
    way = _direction(label) if direction is None else direction
    return [_cell(values[0], unit)] + [
        _cell(v, unit) + _change(values[0], v, way) for v in values[1:]
    ]


def ended(summary: Mapping[str, Any]) -> str:
    """How a run ended: ``killed`` for a partial run's folder, else its stop reason
    (``completed``, ``timeout``, ``interrupted``...); ``-`` when summary.json does not say."""
    run = summary.get("run") or {}
    if run.get("partial"):
        return "killed"
    reason = run.get("stop_reason")
    if reason:
        return str(reason)
    return "interrupted" if run.get("interrupted") else "-"


def ending_notes(summary: Mapping[str, Any]) -> list[str]:
    """What a run's end means for its numbers, one line each: a partial run's (killed), a lost
    shard's, a run not streamed, a run interrupted or stopped early; empty for a run that
    completed streamed."""
    info = summary.get("run") or {}
    notes = [n for n in (partial_note(info), lost_shards_note(info), stream_note(info)) if n]
    if not info.get("partial") and info.get("interrupted"):
        how = ended(summary)
        how = "interrupted" if how in ("interrupted", "-") else f"stopped ({how})"
        notes.append(f"{how}: its numbers cover what was recorded before the stop")
    return notes


def slo_key(slo: Mapping[str, Any]) -> tuple[str, float, float]:
    """What an SLO judges, whatever its name: (metric, percentile, threshold in s)."""
    return (str(slo.get("metric")), float(slo.get("percentile", 0)), float(slo.get("threshold", 0)))


def slo_label(key: tuple[str, float, float]) -> str:
    """``SLO ttfc p99 ≤ 200 ms``: an SLO as :func:`slo_key` has it."""
    metric, percentile, threshold = key
    return f"SLO {metric} p{percentile * 100:g} ≤ {threshold * 1000:.4g} ms"


def slo_results(summary: Mapping[str, Any]) -> dict[tuple[str, float, float], Mapping[str, Any]]:
    """A summary.json's SLO results by :func:`slo_key` (empty without SLOs)."""
    results = (summary.get("slos") or {}).get("results") or []
    return {slo_key(slo): slo for slo in results if isinstance(slo, Mapping)}


def slo_verdict(slo: Mapping[str, Any]) -> str:
    """An SLO result's verdict: ``met``, ``unmet``, or ``no data`` (no sample to judge)."""
    if slo.get("met"):
        return "met"
    return "unmet" if slo.get("samples") else "no data"


def _slo_cell(slo: Mapping[str, Any] | None) -> str:
    if slo is None:
        return "-"
    verdict = slo_verdict(slo)
    if verdict == "no data":
        return "[yellow]no data[/]"
    verdict = "[green]met[/]" if verdict == "met" else "[bold red]unmet[/]"
    if slo.get("beyond_finished"):
        return f"unfinished {verdict}"
    observed = slo.get("observed")
    return verdict if observed is None else f"{number_text(observed * 1000)} ms {verdict}"


#: config.yaml's keys that say where a run wrote, not what it ran.
_NOT_THE_EXPERIMENT = frozenset({"output_dir"})


def scenario_differences(first: Any, other: Any, path: str = "") -> list[str]:
    """The dotted paths (``client.api_base``, ``evaluators[0].slos``) at which two scenarios
    as loaded from config.yaml differ: a mapping key by key, a list of equal length item by
    item, anything else as a whole (the top level's ``output_dir`` is not compared)."""
    if isinstance(first, Mapping) and isinstance(other, Mapping):
        differences: list[str] = []
        for key in [*first, *(k for k in other if k not in first)]:
            where = f"{path}.{key}" if path else str(key)
            if not path and key in _NOT_THE_EXPERIMENT:
                continue
            if key not in first or key not in other:
                differences.append(where)
            else:
                differences.extend(scenario_differences(first[key], other[key], where))
        return differences
    if isinstance(first, list) and isinstance(other, list) and len(first) == len(other):
        differences = []
        for index, (a, b) in enumerate(zip(first, other, strict=True)):
            differences.extend(scenario_differences(a, b, f"{path}[{index}]"))
        return differences
    return [] if first == other else [path or "(the whole scenario)"]


def read_scenario(run_dir: Path) -> dict[str, Any] | None:
    """A run folder's config.yaml as a plain mapping (None when absent or unreadable)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    from veeksha.record.run_folder import CONFIG_FILE

    try:
        data = YAML(typ="safe", pure=True).load((run_dir / CONFIG_FILE).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, YAMLError):
        return None
    return data if isinstance(data, dict) else None


def differences_note(
    label: str, first_label: str, differences: Sequence[str], besides: str = ""
) -> str | None:
    """``B's scenario differs from A's in: seed, client.api_base`` (up to 6 keys named, the
    rest counted); None when there is no difference."""
    if not differences:
        return None
    shown = ", ".join(differences[:_SHOWN_DIFFERENCES])
    more = len(differences) - _SHOWN_DIFFERENCES
    shown += f" and {more} more" if more > 0 else ""
    return f"{label}'s scenario differs from {first_label}'s{besides} in: {shown}"


def dotted(paths: Iterable[str]) -> list[str]:
    """``scenario_differences``' paths in a sweep's swept-key form (``channels.0.x``)."""
    import re

    return [re.sub(r"\[(\d+)\]", r".\1", path) for path in paths]


def _table(headers: Sequence[str]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("metric")
    for header in headers:
        table.add_column(escape(header), justify="right")
    return table


def _run_labels(run: ComparedRun) -> Mapping[str, Any]:
    """summary.json's ``run.labels`` of ``run`` (empty without)."""
    info = run.summary.get("run")
    labels = info.get("labels") if isinstance(info, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _labels_table(runs: Sequence[ComparedRun], headers: Sequence[str]) -> Table:
    """Each label any run has (the scenario's ``labels``), each run's value (``-``: none)."""
    table = _table(headers)
    table.columns[0].header = "label"
    keys = sorted({str(key) for run in runs for key in _run_labels(run)})
    for key in keys:
        values = [_run_labels(run).get(key) for run in runs]
        table.add_row(escape(key), *("-" if v is None else escape(str(v)) for v in values))
    return table


def _fits(console: Console, table: Table) -> bool:
    unbounded = console.options.update(max_width=1 << 20)  # (measure clamps to the width)
    return Measurement.get(console, unbounded, table).maximum <= console.width


def _headline(runs: Sequence[ComparedRun], headers: Sequence[str]) -> Table:
    table = _table(headers)
    summaries = [run.summary for run in runs]
    base_slos = set(slo_results(summaries[0]))
    rows = list(HEADLINE)
    if any(has_values(s, "answer_ttfc") for s in summaries):  # (a reasoning model's answer)
        at = next(i for i, row in enumerate(rows) if row[0] == "TTFC p99") + 1
        rows[at:at] = ANSWER_HEADLINE
    for label, path, scale, unit in rows:
        values = [headline_value(s, path, scale) for s in summaries]
        cells = [_cell(values[0], unit)]
        for summary, value in zip(summaries[1:], values[1:], strict=True):
            cell = _cell(value, unit)
            if label.startswith("goodput") and set(slo_results(summary)) != base_slos:
                cells.append(f"{cell} *" if value is not None else cell)  # (other SLOs)
            else:
                cells.append(cell + _change(values[0], value, _direction(label)))
        table.add_row(label, *cells)
        for status in ("cancelled", "abandoned"):
            if label == "requests total" and any(_requests(s, status) for s in summaries):
                table.add_row(status, *[number_text(_requests(s, status)) for s in summaries])
    if any(s.get("gpus") for s in summaries):  # (the GPUs were sampled: energy per token)
        for label, path, scale, unit in _GPU_ROWS:
            values = [headline_value(s, path, scale) for s in summaries]
            table.add_row(label, *_compared(label, values, unit))
    verdicts = [(s.get("health") or {}).get("verdict", "-") for s in summaries]
    table.add_row("health", *[f"[{VERDICT_STYLE.get(v, '')}]{v}[/]" for v in verdicts])
    table.add_row("SLOs", *[slo_cell(s) for s in summaries])
    keys = list(dict.fromkeys(key for s in summaries for key in slo_results(s)))
    for key in keys:
        table.add_row(slo_label(key), *[_slo_cell(slo_results(s).get(key)) for s in summaries])
    table.add_row("ended", *[ended(s) for s in summaries])
    ramps = [s.get("ramp") for s in summaries]
    if any(ramps):
        table.add_row("ramp (rates /s)", *[_ramp_label(r) for r in ramps])
    return table


def _phase_table(runs: Sequence[ComparedRun], headers: Sequence[str]) -> Table:
    """Each measured phase (by name, in the order the runs first name them) side by side."""
    phases = [run.summary.get("phases") or {} for run in runs]
    table = _table(headers)
    for name in dict.fromkeys(name for sections in phases for name in sections):
        table.add_row(f"[bold]{escape(str(name))}[/]", *["" for _ in runs])
        sections = [sections.get(name) for sections in phases]
        for label, path, scale, unit in _PHASE_ROWS:
            values = [None if s is None else headline_value(s, path, scale) for s in sections]
            table.add_row(f"  {label}", *_compared(label, values, unit))
        table.add_row("  SLOs", *["-" if s is None else slo_cell(s) for s in sections])
    return table


def _scraped(summary: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """summary.json's ``server`` section when the server's metrics were scraped, else None."""
    server = summary.get("server")
    return server if isinstance(server, Mapping) and server.get("scrapes") else None


def _server_rows(table: Table, sections: Sequence[Mapping[str, Any] | None], indent: str) -> None:
    """The server's view rows of ``sections`` (each run's ``server``, or one server's entry of
    ``per_server``; None: the run has none): each row that any of them has."""
    for label, key, scale, unit, direction in _SERVER_ROWS:
        if indent and label not in _PER_SERVER_ROWS:
            continue
        values = [None if s is None else headline_value(dict(s), (key,), scale) for s in sections]
        if any(v is not None for v in values):
            table.add_row(f"{indent}{label}", *_compared(label, values, unit, direction))
    for label, key in _SERVER_LATENCY_ROWS:
        path = ("latency", key, "mean")
        values = [None if s is None else headline_value(dict(s), path, 1000) for s in sections]
        if any(v is not None for v in values):
            table.add_row(f"{indent}{label}", *_compared(label, values, "ms", -1))
        if indent:  # (each server: its TTFT alone)
            break


def _server_table(runs: Sequence[ComparedRun], headers: Sequence[str]) -> Table:
    """The servers' views side by side (their sums, with several servers), then each server's
    own lines by its number."""
    servers = [_scraped(run.summary) for run in runs]
    table = _table(headers)
    _server_rows(table, servers, "")
    lines = [{str(e.get("server")): e for e in (s or {}).get("per_server") or []} for s in servers]
    for number in sorted({n for line in lines for n in line}, key=lambda n: (len(n), n)):
        table.add_row(f"[bold]server {escape(number)}[/]", *["" for _ in runs])
        _server_rows(table, [line.get(number) for line in lines], "  ")
    return table


def _ramp_label(ramp: dict[str, Any] | None) -> str:
    """``2 → 16 linear, 12 s`` (``-``: the rate was constant)."""
    if not ramp:
        return "-"
    rates = f"{number_text(ramp.get('start_rate'))} → {number_text(ramp.get('end_rate'))}"
    return f"{rates} {ramp.get('shape')}, {number_text(ramp.get('duration'))} s"


def _notes(runs: Sequence[ComparedRun], labels: Sequence[str]) -> list[str]:
    """What the reader must know beside the numbers, one line each (markup escaped)."""
    notes: list[str] = []
    first, base_slos = runs[0], set(slo_results(runs[0].summary))
    for run, label in zip(runs, labels, strict=True):
        notes.extend(f"{label}: {note}" for note in ending_notes(run.summary))
    for run, label in zip(runs[1:], labels[1:], strict=True):
        if set(slo_results(run.summary)) != base_slos:
            notes.append(
                f"* {label}'s SLOs are not {labels[0]}'s: its goodput counts the requests that "
                "met its own SLOs, so no change is shown (the SLO rows above: '-' where a run "
                "has no such SLO)"
            )
        if first.scenario is not None and run.scenario is not None:
            differences = scenario_differences(first.scenario, run.scenario)
            note = differences_note(label, labels[0], differences)
            if note is not None:
                notes.append(note)
    if any(run.summary.get("phases") for run in runs):
        notes.append(
            "a run with phases: its numbers above are over all its measured phases together; "
            "each phase is in the phases table"
        )
    if any(run.summary.get("ramp") for run in runs):
        notes.append(
            "a ramped run's numbers above are over its whole ramp, whatever the rate;"
            " compare latency at each offered rate in its ramp table (veeksha report RUN)"
        )
    return notes


def render_compare(console: Console, runs: Sequence[ComparedRun]) -> None:
    """Headline metrics of several runs side by side, with the change relative to the first,
    and the notes that say how far the runs are comparable (see the module docstring)."""
    names = [run.name for run in runs]
    titled: list[tuple[str | None, Callable[[Sequence[ComparedRun], Sequence[str]], Table]]]
    titled = [(None, _headline)]
    if any(_run_labels(run) for run in runs):
        titled.insert(0, ("labels (the scenarios' labels)", _labels_table))
    if any(run.summary.get("phases") for run in runs):
        titled.append(("phases (change relative to the first run's same phase)", _phase_table))
    if any(_scraped(run.summary) for run in runs):
        several = any((_scraped(run.summary) or {}).get("per_server") for run in runs)
        view = "server's view (latency: the means of its histograms)"
        if several:
            view = "servers' views (their sums, then each server's; latency: histogram means)"
        titled.append((view, _server_table))
    headers: Sequence[str] = names
    tables = [make(runs, names) for _, make in titled]
    # (titles on lines of their own: a table's title folds to the table's width)
    console.print("veeksha compare (change relative to the first run)", highlight=False)
    if not all(_fits(console, table) for table in tables):
        headers = [chr(ord("A") + i) if i < 26 else f"R{i + 1}" for i in range(len(runs))]
        for letter, name in zip(headers, names, strict=True):  # (a name is never cut)
            console.print(f"{letter}  {escape(name)}", soft_wrap=True, highlight=False)
        tables = [make(runs, headers) for _, make in titled]
    for (title, _), table in zip(titled, tables, strict=True):
        if title is not None:
            console.print(title, highlight=False, soft_wrap=False)
        console.print(table)
    labels = headers
    for note in _notes(runs, labels):  # (labels: the columns' headers, names or letters)
        console.print(f"[yellow]{escape(note)}[/]")
