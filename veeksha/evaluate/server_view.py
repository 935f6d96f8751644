"""The server's view of a run, from server_metrics.parquet: the summary's ``server`` section,
the aligned timeline plot and the health check that compares the server's count of finished
requests with veeksha's.

``ServerView`` holds one time series per canonical name (``veeksha.server.metric_names``): at each
scrape, the first of the canonical name's metric names present, summed over its label sets (the
ratios kv_usage and prefix_hit_rate: their largest). Counters are read as their increase from the
first scrape (just before t0) to the last (after the traffic), series by series (a name and its
labels) as Prometheus' ``increase()`` reads them: a value below the one before is a reset (the
server restarted, its counters began again from 0), so the increase goes on from 0 there, and a
series that first appears after the first scrape (created at its first event) counts from 0.

The summary's ``server`` section (null values where the server does not export the metric)::

    scrapes, first_t, last_t          how many scrapes, when the first and last were (s since t0)
    running_peak, running_mean        requests the server was running (mean over scrapes)
    waiting_peak, waiting_mean        requests queued in the server
    kv_usage_peak                     largest KV-cache usage seen, 0-1
    prefix_hit_rate                   prefix-cache hits / queries over the run (tokens), as the
                                      server saw it (SGLang: its own hit-rate gauge at the end)
    preemptions                       preemptions during the run
    finished                          requests the server finished during the run
    spec_acceptance_rate,             a server that decodes speculatively (vLLM's spec_decode
    spec_acceptance_length,           counters; absent otherwise): accepted / draft tokens,
    spec_decode                       1 + accepted / drafts, and {drafts, draft_tokens,
                                      accepted_tokens, acceptance_rate, acceptance_length,
                                      per_position} (``ServerView.spec_decode``)
    latency                           its own account of its latency, from its histograms:
                                      {ttft, e2e, queue, prefill, decode, itl: {metric, count,
                                      mean, p50, p90, p99}} (``server_latency``; null without)
    clients                           with several clients on several servers: the names of
                                      the clients the scraped server serves (``scraped_clients``;
                                      absent when it serves every client)

Several clients may go to several servers (docs/agents.md); every one of them is scraped, in
the same rounds, its samples labelled ``server`` (its place: 0 for the first client's), so the
canonical series are the servers' together (running and waiting summed, the KV usage the
largest, the counters' increases summed). With ``server_metrics.url`` only that address is
scraped: ``scraped_clients`` names the clients whose ``api_base`` is on a scraped server (same
scheme, host and port), so the checks and the plot that hold the server's numbers against
veeksha's rows take only those clients' rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa

from veeksha.evaluate.server_latency import histogram_latency, histogram_metrics
from veeksha.evaluate.stats import column, distinct
from veeksha.record import kernels as ak
from veeksha.record.parquet import damaged_file, open_parquet
from veeksha.record.server_metrics import SERVER_METRICS_FILE
from veeksha.server.metric_names import CANONICAL, RATIOS

if TYPE_CHECKING:
    from veeksha.scenario.models import Scenario

__all__ = ["ServerView", "increase", "load_server_view", "scraped_clients"]

#: canonical names that are gauges (besides the RATIOS): read as they are, never as increases
_GAUGES = frozenset({"running", "waiting"})
#: counters whose series are also read one by one, by their labels (a draft's position)
_BY_LABEL = frozenset({"spec_accepted_per_pos"})
#: GPU series without a peak in the ``server`` section: the energy counter (summary's ``gpus``)
#: and the exporter's fields veeksha does not read (gpu:DCGM_FI_... rows, kept in the file)
_NO_PEAK = ("energy_", "DCGM_")


def increase(values: np.ndarray, start: float | None = None) -> float:
    """How much a counter went up over ``values`` (in scrape order), as Prometheus'
    ``increase()`` reads it: each rise counts, and a value below the one before is a reset (the
    counter began again from 0), so that value itself counts. ``start``: the value before the
    first (a series created after the first scrape starts from 0); default the first value."""
    values = np.asarray(values, dtype=float)
    if not values.size:
        return 0.0
    before = np.concatenate(([values[0] if start is None else start], values[:-1]))
    steps = values - before
    return float(np.where(steps >= 0, steps, values).sum())


@dataclass
class ServerView:
    """Canonical series of the server's metrics: name → (times, values), plus the GPU series
    (``gpu:*`` metrics, one per metric and GPU index)."""

    series: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    gpu: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    scrape_times: np.ndarray = field(default_factory=lambda: np.empty(0))
    status: dict[str, str] = field(default_factory=dict)
    #: each counter's increase over the run, summed over its series (load_server_view)
    increases: dict[str, float] = field(default_factory=dict)
    #: the increase of each series of the counters read by their labels (``_BY_LABEL``):
    #: canonical name → the series' labels (JSON) → its increase
    label_increases: dict[str, dict[str, float]] = field(default_factory=dict)
    #: each GPU (its index; "K.I" for GPU I of the K-th of several exporters) → what the
    #: exporter said of it: source, uuid, model
    gpu_info: dict[str, dict[str, str]] = field(default_factory=dict)
    #: the server's latency from its histograms (``veeksha.evaluate.server_latency``)
    latency: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: with several servers scraped, each one's own view (its ``server`` label: "0", "1", ...)
    per_server: dict[str, ServerView] = field(default_factory=dict)

    def delta(self, name: str) -> float | None:
        """A counter's increase from the first scrape to the last, resets counted as such
        (None: not exported)."""
        if name in self.increases:
            return self.increases[name]
        if name not in self.series:
            return None
        return increase(self.series[name][1])

    def section(self) -> dict[str, Any]:
        """The summary.json ``server`` section."""
        times = self.scrape_times
        out: dict[str, Any] = {
            "scrapes": int(times.size),
            "first_t": float(times[0]) if times.size else None,
            "last_t": float(times[-1]) if times.size else None,
            "status": self.status.get("server_metrics_status"),
        }
        out |= self.queue_section()
        if self.per_server:  # (several servers: their sums above, each one's here)
            out["per_server"] = [
                {"server": number, **own.queue_section(), "latency": own.latency or None}
                for number, own in self.per_server.items()
            ]
        out["latency"] = self.latency or None
        for key, (_, values) in sorted(self.gpu.items()):
            if not key.startswith(_NO_PEAK):  # (energy since boot, fields veeksha does not read)
                out[f"{key}_peak"] = float(values.max())
        return out

    def queue_section(self) -> dict[str, Any]:
        """What the canonical series say: running and waiting (peak, mean), the KV usage's
        peak, the prefix-cache hit rate, preemptions and finished requests."""
        out: dict[str, Any] = {}
        for name in ("running", "waiting"):
            values = self.series.get(name, (None, None))[1]
            out[f"{name}_peak"] = None if values is None else float(values.max())
            out[f"{name}_mean"] = None if values is None else float(values.mean())
        kv = self.series.get("kv_usage", (None, None))[1]
        out["kv_usage_peak"] = None if kv is None else float(kv.max())
        hits, queries = self.delta("prefix_hits"), self.delta("prefix_queries")
        if hits is not None and queries:
            out["prefix_hit_rate"] = hits / queries
        elif "prefix_hit_rate" in self.series:
            out["prefix_hit_rate"] = float(self.series["prefix_hit_rate"][1][-1])
        else:
            out["prefix_hit_rate"] = None
        out["preemptions"] = self.delta("preemptions")
        out["finished"] = self.delta("finished")
        spec = self.spec_decode()
        if spec is not None:  # (a server that drafts: what its drafts were worth)
            out["spec_acceptance_rate"] = spec["acceptance_rate"]
            out["spec_acceptance_length"] = spec["acceptance_length"]
            out["spec_decode"] = spec
        return out

    def spec_decode(self) -> dict[str, Any] | None:
        """Speculative decoding over the run, as vLLM's benchmark reads it: the drafts, their
        tokens and the accepted ones; ``acceptance_rate`` = accepted / draft tokens,
        ``acceptance_length`` = 1 + accepted / drafts (tokens a step yields: the accepted ones
        and the one the target model adds), ``per_position``: the share of drafts whose token
        at each position was accepted. None: the server drafted nothing in the run."""
        drafts, tokens = self.delta("spec_drafts"), self.delta("spec_draft_tokens")
        accepted = self.delta("spec_accepted")
        if not drafts or not tokens or accepted is None:
            return None
        by_position: dict[int, float] = {}
        for labels, value in self.label_increases.get("spec_accepted_per_pos", {}).items():
            position = json.loads(labels).get("position")
            if position is not None and str(position).isdigit():
                by_position[int(position)] = by_position.get(int(position), 0.0) + value
        return {
            "drafts": drafts,
            "draft_tokens": tokens,
            "accepted_tokens": accepted,
            "acceptance_rate": accepted / tokens,
            "acceptance_length": 1 + accepted / drafts,
            "per_position": [by_position[i] / drafts for i in sorted(by_position)],
        }


def _root(url: object) -> tuple[str, str] | None:
    """(scheme, host:port) of a URL, the server it names; None when it is not one."""
    if not isinstance(url, str) or not url:
        return None
    parts = urlsplit(url)
    return (parts.scheme.lower(), parts.netloc.lower()) if parts.netloc else None


def scraped_clients(scenario: Scenario, run_info: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The names of the clients whose server's metrics were scraped, when that is not every
    client; None when it is (one client, or every client on that server) or when the run does
    not say where its clients went.

    The scraped addresses are the scraper's (``run.server_metrics.servers``' URLs when it
    scraped several servers, else its ``url``), else ``server_metrics.url``, else the first
    client's server (``run.target``'s ``api_base``); a client is on a scraped server when its
    ``api_base`` has the same scheme, host and port. An empty tuple: the address is none of the
    clients' servers, while they are on several."""
    try:
        target = json.loads(run_info.get("target") or "{}")
    except (TypeError, ValueError):
        return None
    clients = target.get("clients") if isinstance(target, Mapping) else None
    if not isinstance(clients, list) or len(clients) < 2:
        return None
    scraper = run_info.get("server_metrics")
    scraper = scraper if isinstance(scraper, Mapping) else {}
    accounts = scraper.get("servers")  # (several servers scraped: every one's account)
    urls = [a.get("url") for a in accounts if isinstance(a, Mapping)] if accounts else []
    if not urls:
        urls = [scraper.get("url") or scenario.server_metrics.url or target.get("api_base")]
    scraped = {root for root in map(_root, urls) if root is not None}
    roots = {
        str(c.get("name")): _root(c.get("api_base")) for c in clients if isinstance(c, Mapping)
    }
    if not scraped or len(set(roots.values())) < 2:
        return None  # (one server for every client: its metrics are theirs, wherever scraped)
    served = tuple(name for name, root in roots.items() if root in scraped)
    return None if len(served) == len(roots) else served


def load_server_view(run_dir: Path) -> ServerView | None:
    """The view of ``run_dir``'s server_metrics.parquet; None without the file."""
    path = Path(run_dir) / SERVER_METRICS_FILE
    if not path.exists():
        return None
    try:
        with open_parquet(path) as file:  # (not pq.read_table: it loads pandas)
            table = file.read(use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        raise damaged_file(path, exc) from None
    status = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    gpu = ak.starts_with(table["metric"], "gpu:")  # (metric is never null)
    scrape_times = distinct(column(ak.filter_rows(table, ak.invert(gpu)), "t"))
    view = ServerView(scrape_times=scrape_times, status=status)
    named = ak.filter_rows(table, ak.is_valid(table["canonical"])).to_pylist()
    _read_canonical(view, named)
    by_server = _by_server(named)  # (several servers scraped: each one's own line too)
    if len(by_server) > 1:
        for number in sorted(by_server, key=int):
            own = ServerView(scrape_times=scrape_times)
            _read_canonical(own, by_server[number])
            view.per_server[number] = own
    gpu_rows: dict[str, tuple[list[float], list[float]]] = {}
    labelled = [(row, json.loads(row["labels"])) for row in ak.filter_rows(table, gpu).to_pylist()]
    several = len({labels.get("source") for _, labels in labelled}) > 1
    for row, labels in labelled:
        index = str(labels.get("gpu", "0"))
        if several:  # (GPUs of several exporters: the exporter's place in gpu_urls first)
            index = f"{labels.get('source', '0')}.{index}"
        view.gpu_info.setdefault(
            index, {key: str(labels[key]) for key in ("source", "uuid", "model") if key in labels}
        )
        key = f"{row['metric'].removeprefix('gpu:')}_gpu{index}"
        times_values = gpu_rows.setdefault(key, ([], []))
        times_values[0].append(row["t"])
        times_values[1].append(row["value"])
    view.gpu = {key: (np.array(ts), np.array(vs)) for key, (ts, vs) in gpu_rows.items()}
    if scrape_times.size:  # the server's latency, from its histograms
        from veeksha.record.columnar import _strings  # (not pa.array: it loads pandas)

        names: list[str | None] = list(histogram_metrics())
        wanted = ak.is_in(table["metric"], _strings(names))
        rows = ak.filter_rows(table, wanted).to_pylist()
        first_t = float(scrape_times[0])
        view.latency = histogram_latency(rows, first_t, increase)
        rows_of = _by_server(rows) if view.per_server else {}
        for number, own in view.per_server.items():  # (each one's, where a slow replica shows)
            own.latency = histogram_latency(rows_of.get(number, []), first_t, increase)
    return view


def _by_server(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``rows`` by their ``server`` label (several servers scraped: "0", "1", ...); rows
    without one are left out."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        number = json.loads(row["labels"]).get("server")
        if number is not None:
            out.setdefault(str(number), []).append(row)
    return out


def _read_canonical(view: ServerView, named: list[dict[str, Any]]) -> None:
    """``view``'s canonical series and counters' increases from the rows of ``named`` (the
    rows with a canonical name: all of them, or one server's)."""
    # canonical → t → [best rank, values of the best-ranked name there]
    best: dict[str, dict[float, tuple[int, list[float]]]] = {}
    for row in named:
        canonical = row["canonical"]
        metrics = CANONICAL.get(canonical, ())
        rank = metrics.index(row["metric"]) if row["metric"] in metrics else len(metrics)
        at = best.setdefault(canonical, {})
        held = at.get(row["t"])
        if held is None or rank < held[0]:
            at[row["t"]] = (rank, [row["value"]])
        elif rank == held[0]:
            held[1].append(row["value"])
    for canonical, at in best.items():
        times = np.array(sorted(at))
        reduce = max if canonical in RATIOS else sum
        values = np.array([float(reduce(at[t][1])) for t in times])
        view.series[canonical] = (times, values)
    # counters, series by series (a reset, or a label set that vanished, would make the sum fall)
    per_series: dict[str, dict[tuple[str, str], list[tuple[float, float]]]] = {}
    for row in named:
        canonical = row["canonical"]
        if canonical in RATIOS or canonical in _GAUGES:
            continue
        metrics = CANONICAL.get(canonical, ())
        rank = metrics.index(row["metric"]) if row["metric"] in metrics else len(metrics)
        if best[canonical][row["t"]][0] != rank:
            continue
        series_key = (row["metric"], row["labels"])
        per_series.setdefault(canonical, {}).setdefault(series_key, []).append(
            (row["t"], row["value"])
        )
    for canonical, series in per_series.items():
        first = view.series[canonical][0][0]
        total = 0.0
        for (_, labels), samples in series.items():
            samples.sort()
            values = np.array([value for _, value in samples])
            rise = increase(values, start=None if samples[0][0] == first else 0.0)
            total += rise
            if canonical in _BY_LABEL:
                by_label = view.label_increases.setdefault(canonical, {})
                by_label[labels] = by_label.get(labels, 0.0) + rise
        view.increases[canonical] = total
