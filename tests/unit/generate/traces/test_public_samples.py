"""The sample traces of scenarios/traces/ are what their generator writes, and their scenarios
load."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from veeksha.scenario.loader import load_scenario
from veeksha.scenario.models import TraceSessionGenerator

FOLDER = Path(__file__).resolve().parents[4] / "scenarios" / "traces"


def test_the_shipped_samples_are_the_generators_output(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("samples", FOLDER / "make_public_samples.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for path in module.write_samples(tmp_path):
        assert path.read_bytes() == (FOLDER / path.name).read_bytes(), path.name


@pytest.mark.parametrize(
    "name", ["mooncake", "azure_llm", "burstgpt", "sharegpt", "rag", "prompts"]
)
def test_each_public_format_has_a_scenario_on_its_sample(name: str) -> None:
    scenario = load_scenario(FOLDER / f"{name}.yaml")
    generator = scenario.session_generator
    assert isinstance(generator, TraceSessionGenerator)
    assert (FOLDER.parents[1] / generator.trace_file).is_file()
