"""Health checks: proof that the benchmark itself behaved, judged after every run.

Vocabulary:

- a *check* (``HealthCheck``) is a small object: a name, a one-line description and a function of
  the run's tables (``HealthInput``) returning an ``Outcome``: PASS, WARN (passed, with something
  the reader must know, e.g. a substituted time), FAIL or SKIP (not applicable, or no data), a
  one-line detail and the statistics it judged on;
- the checks are gathered in the explicit tuple ``veeksha.evaluate.checks.HEALTH_CHECKS``;
- the *verdict* is PASS when no check failed (WARN and SKIP do not fail a run).

Thresholds come from the scenario's ``health_checks`` section. Results go to ``health.json`` (the
statistics, machine-readable) and ``health.txt`` (one block per check, for people); the verdict is
also stored in the Parquet metadata by the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import pyarrow as pa

from veeksha.evaluate.jsonio import jsonable, write_json
from veeksha.plural import counted
from veeksha.scenario.models import HealthChecks, Scenario

if TYPE_CHECKING:
    from veeksha.evaluate.server_view import ServerView

__all__ = [
    "FAIL",
    "PASS",
    "SKIP",
    "WARN",
    "CheckResult",
    "HealthCheck",
    "HealthInput",
    "HealthReport",
    "Outcome",
    "Status",
    "lost_shards_note",
    "partial_note",
]

Status = Literal["PASS", "WARN", "FAIL", "SKIP"]
PASS: Status = "PASS"
WARN: Status = "WARN"
FAIL: Status = "FAIL"
SKIP: Status = "SKIP"


@dataclass(frozen=True, slots=True)
class HealthInput:
    """What a check sees: every request (all phases), the measured requests and sessions."""

    requests: pa.Table
    measured: pa.Table
    sessions: pa.Table
    scenario: Scenario
    run_info: Mapping[str, Any] = field(default_factory=dict)
    server: ServerView | None = None  # the server's own metrics (server_metrics.parquet)

    @property
    def thresholds(self) -> HealthChecks:
        return self.scenario.health_checks


class Outcome(NamedTuple):
    """What a check function returns."""

    status: Status
    detail: str
    statistics: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check, with the check's name and description."""

    name: str
    description: str
    status: Status
    detail: str
    statistics: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "status": self.status,
            "detail": self.detail,
            "statistics": jsonable(self.statistics),
        }


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """One self-check of the benchmark: ``check(input)`` runs it."""

    name: str
    description: str
    function: Callable[[HealthInput], Outcome]

    def __call__(self, data: HealthInput) -> CheckResult:
        status, detail, statistics = self.function(data)
        return CheckResult(self.name, self.description, status, detail, statistics)


def partial_note(run_info: Mapping[str, Any]) -> str | None:
    """What the figures of a partial run (``veeksha report`` of a folder whose end was never
    written: a killed run) leave out, in one line; None for a run that ended. ``run_info``'s
    ``unrecorded_requests``: its trace's dispatched requests without a row (None: no trace)."""
    if not run_info.get("partial"):
        return None
    missing = run_info.get("unrecorded_requests")
    if missing is None:
        count = "an unknown number of dispatched requests (no trace.jsonl to count them)"
    else:
        count = f"at least {missing} dispatched request{'' if missing == 1 else 's'}"
    return (
        "partial run: it did not end (killed, or its results could not be written), so every "
        f"figure covers only the requests recorded; {count} have no row (in flight at the end, "
        "or answered in its last second) and are not counted"
    )


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def lost_shards_note(run_info: Mapping[str, Any]) -> str | None:
    """What a distributed run that lost a shard leaves out, in one line (``run_info``'s
    ``distributed``, written by the merge); None when no shard was lost."""
    distributed = run_info.get("distributed")
    if not isinstance(distributed, Mapping) or not distributed.get("lost_shards"):
        return None
    lost = dict(distributed["lost_shards"])
    per_shard = {
        str(info.get("index")): info
        for info in distributed.get("per_shard") or []
        if isinstance(info, Mapping)
    }
    shards = []
    for index, why in sorted(lost.items()):
        at = (per_shard.get(index) or {}).get("last_report_s")
        when = "" if at is None else f", its last report at {at:.3f} s"
        shards.append(f"shard {index} lost ({why}{when})")
    in_flight = int(distributed.get("requests_lost_in_flight") or 0)
    incomplete = int(distributed.get("sessions_incomplete") or 0)
    not_run = int(distributed.get("sessions_not_run") or 0)
    return (
        f"{'; '.join(shards)}: {_count(in_flight, 'request')} in flight "
        f"{'is a shard_lost row' if in_flight == 1 else 'are shard_lost rows'} (outcome "
        "unknown: cut off in flight in the SLOs, not in the throughput), "
        f"{_count(incomplete, 'session')} incomplete, {_count(not_run, 'session')} of its "
        "never started; what it answered in its last second may be among the shard_lost rows, "
        "and what it sent after its last report has no row: the rates cover what the shards "
        "recorded, not the traffic the scenario asked for"
    )


@dataclass(frozen=True, slots=True)
class HealthReport:
    """Every check's result and the overall verdict; ``notes``: what the reader must know of
    the run itself (``partial_note``), first in health.txt."""

    results: tuple[CheckResult, ...]
    notes: tuple[str, ...] = ()

    @property
    def verdict(self) -> Status:
        """PASS unless a check failed."""
        return FAIL if any(r.status == FAIL for r in self.results) else PASS

    @property
    def failed(self) -> list[str]:
        return [r.name for r in self.results if r.status == FAIL]

    def to_dict(self) -> dict[str, Any]:
        """The content of health.json."""
        return {
            "verdict": self.verdict,
            "failed": self.failed,
            "notes": list(self.notes),
            "checks": [r.to_dict() for r in self.results],
        }

    def to_text(self) -> str:
        """The content of health.txt: the verdict, then one block per check."""
        lines = [f"health verdict: {self.verdict}", *self.notes, ""]
        for r in self.results:
            lines.append(f"[{r.status}] {r.name}: {r.detail}")
            lines.append(f"    {r.description}")
            for key, value in jsonable(r.statistics).items():
                lines.append(f"    {key}: {_fmt(value)}")
            lines.append("")
        return "\n".join(lines)

    def write(self, run_dir: Path) -> None:
        """Write health.json and health.txt into ``run_dir``."""
        write_json(run_dir / "health.json", self.to_dict())
        (run_dir / "health.txt").write_text(self.to_text(), encoding="utf-8")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
    if isinstance(value, list):
        return f"{counted(len(value), 'entry', 'entries')} (see health.json)"
    if value is None:
        return "-"
    return str(value)
