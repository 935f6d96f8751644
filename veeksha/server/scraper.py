"""``MetricsScraper``: the server's Prometheus ``/metrics``, read on a thread of its own.

The thread scrapes at once, then at ``t0 + k × interval`` (an absolute schedule: a slow scrape
delays only itself), once more when stopped (so counters have a value at both ends of the run),
parses each answer with ``prometheus_client``'s text parser and hands the samples to the
``ServerMetricsWriter``. It runs in the server watch's process (``veeksha.server.watch_process``),
never in veeksha's main one: parsing costs ~20-40 µs of CPU a line (a vLLM answer: ~30 ms), GIL
the traffic's event loop would otherwise wait for (``benchmarks/server_metrics.py``).

A scrape that fails (no answer, an HTTP error, a body that is not Prometheus text) costs one
warning (the first), and the run goes on; the file's metadata says how many failed and why
(``status``: what :meth:`MetricsScraper.stop` returns).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from veeksha.errors import TargetError
from veeksha.net import fetch
from veeksha.record.server_metrics import Sample, ServerMetricsWriter
from veeksha.redact import Redactors, header_secrets
from veeksha.server.metric_names import canonical_name

__all__ = ["MetricsScraper", "parse_metrics", "with_server_label"]

_NS = 1_000_000_000
_FLUSH_EVERY = 10  # scrapes per Parquet part
_MAX_BODY = 16 * 1024 * 1024


def parse_metrics(text: str, pause: Callable[[], None] | None = None) -> list[Sample]:
    """The samples of a Prometheus text answer; ``ValueError`` when it is not one.

    ``pause()`` runs after each metric family: the scraper releases the GIL there, so the event
    loop never waits for more than one family's parse (the parser costs ~20 µs a line: a
    whole vLLM answer, ~1,000 lines, would otherwise hold the GIL for ~20 ms)."""
    # (loaded by ServerWatch.for_run before t0, and only when scraping: ~30 ms of start-up)
    from prometheus_client.parser import text_string_to_metric_families

    samples: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = json.dumps(sample.labels, sort_keys=True, separators=(",", ":"))
            value = float(sample.value)
            samples.append((sample.name, labels, value, family.type, canonical_name(sample.name)))
        if pause is not None:
            pause()
    return samples


def with_server_label(samples: list[Sample], number: int) -> list[Sample]:
    """``samples`` with the label ``server`` (the server's place among the scraped ones) added
    to their labels (sorted JSON, as :func:`parse_metrics` writes them)."""
    out: list[Sample] = []
    for metric, labels, value, kind, canonical in samples:
        merged = {**json.loads(labels), "server": str(number)}
        text = json.dumps(merged, sort_keys=True, separators=(",", ":"))
        out.append((metric, text, value, kind, canonical))
    return out


def _yield_gil() -> None:
    time.sleep(0)  # releases the GIL: the event loop runs now if it was waiting


class MetricsScraper:
    """Scrapes ``url`` (and its ``followers``' URLs, in the same rounds) every ``interval_s``
    into ``writer`` until ``stop()``."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        interval_s: float,
        t0_ns: int,
        writer: ServerMetricsWriter,
        warn: Callable[[str], None],
        headers: dict[str, str] | None = None,
        transform: Callable[[list[Sample]], list[Sample]] | None = None,
        what: str = "server metrics",
        hint: str = "set server_metrics.url, or server_metrics.enabled: false",
        followers: list[MetricsScraper] | None = None,
    ) -> None:
        self.url = url
        # the other servers of the run's clients, scraped in each of this one's rounds (never
        # started themselves): every sample labelled with its server's place (``server``)
        self._followers = list(followers or ())
        # (a GPU exporter's scrape: its fields renamed to gpu:* rows, veeksha.server.dcgm)
        self._transform = transform
        self._what = what  # how its warnings start, and what they suggest
        self._hint = hint
        self._api_key = api_key
        self._headers = headers  # the client's own (client.headers), sent beside its key
        # (a parser error quotes the body: it may echo the key or a header's credential)
        self._redact = Redactors(header_secrets(api_key, headers))
        self._interval_ns = round(interval_s * _NS)
        self._timeout_s = min(max(interval_s, 0.5), 5.0)
        self._t0_ns = t0_ns
        self._writer = writer
        self._warn = warn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=what, daemon=True)
        self.scrapes = 0
        self.failed = 0
        self.error: str | None = None
        self.write_error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Stop the thread after one last scrape; what happened (for the file's metadata: this
        server's account, and with followers ``servers``, every server's)."""
        self._stop.set()
        if self._thread.ident is not None:  # (never started: the run failed before t0)
            self._thread.join()
        self.scrape()
        status = self.status()
        if self._followers:
            status["servers"] = [dict(status), *(f.status() for f in self._followers)]
        return status

    def status(self) -> dict[str, Any]:
        ok = self.scrapes - self.failed
        state = "ok" if not self.failed else ("failed" if not ok else "partial")
        return {
            "url": self.url,
            "status": state,
            "scrapes": self.scrapes,
            "failed": self.failed,
            "error": self.error,
        }

    def _run(self) -> None:
        due = self._t0_ns
        while True:
            self.scrape()
            now = time.monotonic_ns()
            due += self._interval_ns
            if due <= now:  # (a scrape took longer than the interval: the next one is now)
                due = now + self._interval_ns - (now - due) % self._interval_ns
            if self._stop.wait((due - now) / _NS):
                return

    def scrape(self) -> None:
        """One scrape (of this server and its followers) into the writer; a failure is counted
        (and warned about once, each server's)."""
        taken = self.take()
        t, batch = (None, []) if taken is None else taken
        if self._followers:  # several servers: each sample says whose, all at the round's time
            batch = with_server_label(batch, 0)
            for number, follower in enumerate(self._followers, start=1):
                got = follower.take()
                if got is not None:
                    # the round's time is its last answer's: every server had been read by
                    # then, so a request sent later is in none of this round's counts (the
                    # first answer's time read a request sent between two servers' reads as
                    # counted before t0, and server_agreement failed under load)
                    t = got[0] if t is None else max(t, got[0])
                    batch += with_server_label(got[1], number)
        if t is None or not batch:
            return
        self._writer.add(t, batch)
        if self.scrapes % _FLUSH_EVERY == 0 and self.write_error is None:
            try:
                self._writer.flush()
            except OSError as exc:  # (kept in memory; close tries once more)
                self.write_error = str(exc)
                self._warn(f"{self._what}: cannot write a part of server_metrics.parquet: {exc}")

    def take(self) -> tuple[float, list[Sample]] | None:
        """One GET of this scraper's URL: (when its answer came, s since t0; its samples), or
        None when it failed (counted, and warned about once)."""
        self.scrapes += 1
        try:
            answer = fetch(
                "GET",
                self.url,
                api_key=self._api_key,
                headers=self._headers,
                timeout_s=self._timeout_s,
                max_body=_MAX_BODY,
            )
            # when the answer came, not when it was parsed: a long page (a big server's
            # thousands of series) takes seconds to parse, its values are of the arrival
            t = (time.monotonic_ns() - self._t0_ns) / _NS
            if not answer.ok:
                raise ValueError(f"HTTP {answer.status} {answer.reason}".strip())
            samples = parse_metrics(answer.body.decode("utf-8", errors="replace"), _yield_gil)
            if samples and self._transform is not None:
                samples = self._transform(samples)
                if not samples:
                    raise ValueError("the answer holds no GPU's fields (no sample labelled gpu)")
            if not samples:
                raise ValueError("the answer holds no metrics")
        except TargetError as exc:  # (fetch's own words: "GET {url}: {what happened}")
            self._failed(str(exc))
            return None
        except (ValueError, UnicodeError) as exc:
            self._failed(f"GET {self.url}: {exc}")
            return None
        return t, samples

    def _failed(self, error: str) -> None:
        """Count a failed scrape; ``error`` names the request once and says why."""
        self.failed += 1
        if self.error is None:
            self.error = self._redact(error, limit=500)
            self._warn(f"{self._what}: {self.error}; the run goes on without them ({self._hint})")
