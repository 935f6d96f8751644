"""The example traces shipped in scenarios/traces/ are make_traces.py's output and replay."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.generate.traces import open_trace
from veeksha.scenario.loader import load_scenario

REPO = Path(__file__).resolve().parents[4]
TRACES = REPO / "scenarios" / "traces"


def test_the_shipped_traces_are_the_scripts_output() -> None:
    spec = importlib.util.spec_from_file_location("make_traces", TRACES / "make_traces.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, make in module.FILES.items():
        stale = f"{name} differs: run python scenarios/traces/make_traces.py"
        assert (TRACES / name).read_text() == make(), stale


def test_the_trace_replay_scenario_opens_its_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("XDG_CACHE_HOME", str(REPO / ".no-such-cache"))
    scenario = load_scenario(REPO / "scenarios" / "trace_replay.yaml")
    trace = open_trace(scenario)
    assert trace.prepared.rows == 240
    first = trace.sessions(scenario.seed, BuiltinTokenizer()).session(0)
    assert first.nodes[0].prompt_tokens >= 1
