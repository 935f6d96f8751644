"""The capacity search file: the public veeksha keys, our extra keys, and the scenario.

```yaml
output_dir: capacity_output       # base folder (default capacity_search_output)
start_value: 1                    # first value probed (> 0)
max_value: 16                     # the search never probes above it (>= start_value)
expansion_factor: 2               # geometric growth of the first phase (> 1)
max_iterations: 20                # probes (values) at most, both phases
precision: 0                      # decimal places of the value grid (a concurrency: integers)
confidence: 0.95                  # of each SLO percentile's interval (veeksha's addition)
max_extensions: 2                 # extra runs of an undecided value (veeksha's addition)
warmup_seconds: 1.0               # per probe, when the scenario has no warmup (veeksha's addition)
benchmark_config: scenario.yaml   # the scenario: a path (relative to this file) or a mapping
```

The keys may also sit under one top-level ``capacity_search_config:`` mapping (the public
reference's layout). Command-line flags override the file's values. Every problem is reported
at once, as ``file:line:column: key: message``, as the scenario loader does (exit 2).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap

from veeksha.errors import ScenarioError, ScenarioIssue
from veeksha.experiment.capacity.knob import Knob, knob_of
from veeksha.experiment.capacity.search import SearchSettings
from veeksha.scenario.loader import load_scenario, load_scenario_node
from veeksha.scenario.messages import closest, shown
from veeksha.scenario.models import SLO, RateScheduler, Scenario
from veeksha.scenario.overrides import format_path, override_label, parse_override
from veeksha.scenario.tags import non_text_keys, parse_document, read_text, refuse_tags

__all__ = ["CAPACITY_KEYS", "CapacityConfig", "load_capacity_config"]

#: key → (default, kind, meaning); the file's keys besides ``benchmark_config``.
CAPACITY_KEYS: dict[str, tuple[Any, type, str]] = {
    "output_dir": ("capacity_search_output", str, "base folder of capacity search folders"),
    "start_value": (1.0, float, "first value probed (> 0)"),
    "max_value": (100.0, float, "highest value probed (>= start_value)"),
    "expansion_factor": (2.0, float, "growth factor of the geometric phase (> 1)"),
    "max_iterations": (20, int, "values probed at most, both phases (>= 1)"),
    "precision": (2, int, "decimal places of the value grid (>= 0); a concurrency is an integer"),
    "confidence": (0.95, float, "confidence of each SLO percentile's interval, in (0, 1)"),
    "max_extensions": (2, int, "extra runs (2x, 4x... the requests) of an undecided value (>= 0)"),
    "warmup_seconds": (1.0, float, "warmup per probe when the scenario sets none (>= 0)"),
}
_WRAPPER = "capacity_search_config"


@dataclass(frozen=True)
class CapacityConfig:
    """A checked capacity search: the search keys, the scenario, its knob and SLOs."""

    source: str
    scenario: Scenario
    knob: Knob
    output_dir: str = "capacity_search_output"
    start_value: float = 1.0
    max_value: float = 100.0
    expansion_factor: float = 2.0
    max_iterations: int = 20
    precision: int = 2
    confidence: float = 0.95
    max_extensions: int = 2
    warmup_seconds: float = 1.0
    benchmark_config: str = field(default="<inline>")

    @property
    def slos(self) -> list[SLO]:
        return [slo for evaluator in self.scenario.evaluators for slo in evaluator.slos]

    @property
    def settings(self) -> SearchSettings:
        return SearchSettings(
            self.start_value,
            self.max_value,
            self.expansion_factor,
            self.max_iterations,
            self.precision,
            self.knob.integer,
        )

    def search_keys(self) -> dict[str, Any]:
        """The search keys as resolved (for capacity.json)."""
        return {key: getattr(self, key) for key in CAPACITY_KEYS}


class _Issues:
    def __init__(self, source: str) -> None:
        self.source = source
        self.found: list[ScenarioIssue] = []

    def at(self, node: CommentedMap | None, key: str, message: str, path: str = "") -> None:
        line = column = None
        if node is not None:
            if key in node:
                line, column = (n + 1 for n in node.lc.key(key))
            else:
                line, column = node.lc.line + 1, node.lc.col + 1
        self.found.append(ScenarioIssue(self.source, line, column, path or key, message))

    def flag(self, key: str, message: str) -> None:
        flag = "--" + key.replace("_", "-")
        self.found.append(ScenarioIssue(f"<{flag}>", None, None, key, message))


def _unknown_key(key: str, allowed: set[str]) -> str:
    """The message for an unknown key of the search file: the key it resembles, or the
    scenario section it belongs under, or the list of keys."""
    if key in Scenario.model_fields:  # (before a resemblance: session_generator ~ expansion_factor)
        return "a key of the scenario: move it under benchmark_config (or into its file)"
    near = closest(key, sorted(allowed))
    if near is not None:
        return f"unknown key; did you mean {near!r}?"
    return f"unknown key; allowed keys: {', '.join(sorted(allowed))}"


def _search_keys(loaded: Any) -> CommentedMap | None:
    """The keys of a capacity search file as loaded from YAML (a top-level
    ``capacity_search_config:`` mapping unwrapped), or None when it holds no ``benchmark_config``
    (a scenario, or not a mapping)."""
    if not isinstance(loaded, CommentedMap):
        return None
    wrapped = loaded.get(_WRAPPER)
    if len(loaded) == 1 and isinstance(wrapped, CommentedMap):
        loaded = wrapped
    return loaded if "benchmark_config" in loaded else None


def _not_a_scenario(written: str, path: Path, inner: CommentedMap, base: Path) -> str:
    """What to say of a ``benchmark_config`` (``written``, at ``path``) that names another
    capacity search file, whose keys are ``inner``: the scenario that file names, as a path
    from this search file's folder ``base``, or where its inline scenario is."""
    named = inner.get("benchmark_config")
    if isinstance(named, str):
        target = Path(named) if Path(named).is_absolute() else path.parent / named
        fix = f"give the scenario file it names: benchmark_config: {os.path.relpath(target, base)}"
    else:
        fix = "give a scenario: its benchmark_config mapping, here or in a file of its own"
    return f"{written!r} is a capacity-search file (it has benchmark_config), not a scenario: {fix}"


def _read(path: Path) -> CommentedMap:
    source = str(path)
    root = parse_document(read_text(path), source)  # (a YAML error: one line at its place)
    if not isinstance(root, CommentedMap):
        message = "a capacity search file is a mapping of keys (start_value, benchmark_config...)"
        raise ScenarioError([ScenarioIssue(source, 1, 1, "", message)])
    keys = _search_keys(root) or root
    # the search's own keys take plain values (benchmark_config is a scenario: its tags work)
    wrong = [
        *non_text_keys(root, source),
        *refuse_tags(keys, source, "a search key", skip=("benchmark_config",)),
    ]
    if wrong:
        raise ScenarioError(wrong)
    return keys


#: What a search key's value must be, by its kind (``CAPACITY_KEYS``).
_KINDS = {int: "an integer", float: "a finite number", str: "non-empty text"}


def _typed(value: Any, kind: type) -> Any:
    if isinstance(value, bool):
        raise ValueError
    if kind is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if not isinstance(value, int):
            raise ValueError
        return int(value)
    if kind is float:
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError
        return float(value)
    if not isinstance(value, str) or not value:
        raise ValueError
    return str(value)


def _check_values(values: Mapping[str, Any], report: Any) -> None:
    rules = (
        ("start_value", lambda v: v > 0, "must be greater than 0"),
        ("max_value", lambda v: v > 0, "must be greater than 0"),
        ("expansion_factor", lambda v: v > 1, "must be greater than 1"),
        ("max_iterations", lambda v: v >= 1, "must be at least 1"),
        ("precision", lambda v: 0 <= v <= 6, "must be between 0 and 6 (decimal places)"),
        ("confidence", lambda v: 0 < v < 1, "must be between 0 and 1, e.g. 0.95"),
        ("max_extensions", lambda v: v >= 0, "must be 0 or more"),
        ("warmup_seconds", lambda v: v >= 0, "must be 0 or more"),
    )
    for key, ok, message in rules:
        if key in values and not ok(values[key]):
            report(key, f"{message} (got {shown(values[key])})")
    start, top = values.get("start_value", 1.0), values.get("max_value", 100.0)
    if start > 0 and top > 0 and start > top:
        report(
            "start_value",
            f"start_value ({start:g}) must be at most max_value ({top:g}): lower start_value "
            "or raise max_value",
        )


def _scenario(
    root: CommentedMap, base: Path, overrides: Sequence[str], issues: _Issues
) -> tuple[Scenario, str, CommentedMap | None, str]:
    """The scenario, where it came from (path or <inline>), its YAML node and its file."""
    node = root.get("benchmark_config")
    if "benchmark_config" not in root or node is None:
        issues.at(root, "benchmark_config", "missing: the scenario, a path or a mapping")
        raise ScenarioError(issues.found)
    if isinstance(node, str):
        path = Path(node) if Path(node).is_absolute() else base / node
        if not path.is_file():
            issues.at(
                root,
                "benchmark_config",
                f"no scenario file {str(path)!r}: give a path relative to the search file's "
                "folder (or an absolute one), or the scenario itself as a mapping",
            )
            raise ScenarioError(issues.found)
        try:
            scenario_root = parse_document(path.read_text(encoding="utf-8"), str(path))
        except (OSError, ScenarioError, UnicodeDecodeError):
            scenario_root = None  # (the scenario loader says what is wrong with it)
        inner = _search_keys(scenario_root)
        if inner is not None:  # each of its keys would be an unknown key of a scenario
            issues.at(root, "benchmark_config", _not_a_scenario(node, path, inner, base))
            raise ScenarioError(issues.found)
        try:
            scenario = load_scenario(path, overrides)
        except ScenarioError as exc:
            raise ScenarioError([*issues.found, *exc.issues]) from None
        return scenario, str(path), scenario_root, str(path)
    if not isinstance(node, CommentedMap):
        issues.at(root, "benchmark_config", "must be a scenario mapping or a path to one")
        raise ScenarioError(issues.found)
    try:
        scenario = load_scenario_node(node, issues.source, overrides)
    except ScenarioError as exc:
        nested = [
            replace(i, path=f"benchmark_config.{i.path}".rstrip("."))
            if i.file == issues.source
            else i
            for i in exc.issues
        ]
        raise ScenarioError([*issues.found, *nested]) from None
    return scenario, "<inline>", node, issues.source


def _one_load_per_probe(
    scenario: Scenario, node: CommentedMap | None, prefix: str, where: _Issues
) -> None:
    """Refuse what makes one probe run several loads: the knob sets one value, and a probe's
    verdict pools every measured request, so each probe must hold its load for the whole run."""
    traffic = scenario.traffic_scheduler
    held = node.get("traffic_scheduler") if node is not None else None
    if isinstance(traffic, RateScheduler) and traffic.ramp is not None:
        where.at(
            held if isinstance(held, CommentedMap) else node,
            "ramp",
            "a capacity search holds one rate per probe, and its knob sets only the start rate "
            "(the ramp's end_rate would stay put); remove traffic_scheduler.ramp (a ramp finds "
            "the knee in one veeksha run instead)",
            f"{prefix}traffic_scheduler.ramp",
        )
    if scenario.phases:
        where.at(
            node,
            "phases",
            "a capacity search holds one load per probe, and its knob sets only the scheduler's "
            "own value (a phase's arrival_rate, interval or target would stay put); remove "
            "phases (for a warmup: runtime.warmup_seconds, or the search's warmup_seconds)",
            f"{prefix}phases",
        )


def _search_overrides(overrides: Sequence[str], issues: _Issues) -> list[str]:
    """The overrides meant for the scenario; an override of a search key (``start_value=2``) or
    one that spells the scenario as ``benchmark_config.`` is reported with the form that works
    (``--set`` reaches the scenario's own keys, as in ``veeksha run``)."""
    kept = []
    for text in overrides:
        try:
            path = parse_override(text).path
        except ScenarioError:  # (malformed: the scenario loader says how)
            kept.append(text)
            continue
        head, value = path[0], override_label(text).partition("=")[2]  # (a secret: ***)
        if head in CAPACITY_KEYS and len(path) == 1:
            flag = "--" + str(head).replace("_", "-")
            message = (
                f"a key of the search, not of its scenario: give {flag} {value} "
                f"(--set reaches the scenario's keys)"
            )
        elif head == "benchmark_config" and len(path) > 1:
            message = f"--set takes the scenario's own keys: --set {format_path(path[1:])}={value}"
        else:
            kept.append(text)
            continue
        issues.found.append(ScenarioIssue(override_label(text), None, None, str(head), message))
    return kept


def _knob_overrides(overrides: Sequence[str], knob: Knob, issues: _Issues) -> None:
    """An override of the knob itself would be overwritten by every probe: refused."""
    for text in overrides:
        try:
            path = format_path(parse_override(text).path)
        except ScenarioError:
            continue
        if path == knob.path:
            issues.found.append(
                ScenarioIssue(
                    override_label(text),
                    None,
                    None,
                    path,
                    "the searched knob: each probe sets it, so this --set would change nothing; "
                    "choose the values with --start-value and --max-value",
                )
            )


def load_capacity_config(
    path: str | Path,
    flags: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
) -> CapacityConfig:
    """Read and check a capacity search file; ``flags`` (key → value, None = not given) override
    its keys, ``overrides`` (``key.path=value``) its scenario. Raises ``ScenarioError`` listing
    every problem (file:line:column)."""
    file = Path(path)
    root = _read(file)
    issues = _Issues(str(file))
    values: dict[str, Any] = {}
    allowed = {*CAPACITY_KEYS, "benchmark_config"}
    for key in root:
        if key not in allowed:
            issues.at(root, str(key), _unknown_key(str(key), allowed))
    for key, (_default, kind, meaning) in CAPACITY_KEYS.items():
        if key in root:
            try:
                values[key] = _typed(root[key], kind)
            except ValueError:
                issues.at(root, key, f"must be {_KINDS[kind]}: {meaning} (got {shown(root[key])})")
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    for key, value in given.items():
        values[key] = value
    _check_values(
        values,
        lambda key, message: (
            issues.flag(key, message) if key in given else issues.at(root, key, message)
        ),
    )
    scenario_overrides = _search_overrides(overrides, issues)
    scenario, origin, node, scenario_file = _scenario(root, file.parent, scenario_overrides, issues)
    knob = knob_of(scenario)
    if knob is not None:
        _knob_overrides(scenario_overrides, knob, issues)
    where = _Issues(scenario_file)
    prefix = "benchmark_config." if origin == "<inline>" else ""
    if knob is None:
        held = node.get("traffic_scheduler") if node is not None else None
        where.at(
            held if isinstance(held, CommentedMap) else node,
            "type",
            "a capacity search varies an arrival rate (type: rate) or a concurrency "
            "(type: concurrent); a trace scheduler replays the trace's own times",
            f"{prefix}traffic_scheduler.type",
        )
    _one_load_per_probe(scenario, node, prefix, where)
    if not any(evaluator.slos for evaluator in scenario.evaluators):
        where.at(
            node,
            "evaluators",
            "no SLO: a capacity search needs evaluators[].slos to judge each probe, e.g. "
            "evaluators: [{type: performance, slos: [{name: p99 TTFC, metric: ttfc, "
            "percentile: 0.99, value: 0.5}]}]",
            f"{prefix}evaluators",
        )
    issues.found += where.found
    if issues.found:
        raise ScenarioError(issues.found)
    assert knob is not None
    known = {k: values[k] for k in CAPACITY_KEYS if k in values}
    return CapacityConfig(str(file), scenario, knob, benchmark_config=origin, **known)
