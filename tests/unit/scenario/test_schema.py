"""The JSON Schema: freshness, draft, discriminators, and agreement with pydantic on samples."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from veeksha.scenario.reference import DOCS_PATH, updated_docs
from veeksha.scenario.schema import SCHEMA_DIALECT, SCHEMA_PATH, schema_text, write_schema

from .helpers import REPO, SCENARIOS, UPSTREAM_SAMPLES

FIX = "regenerate with: python -m veeksha.scenario.schema"


def test_committed_schema_is_fresh() -> None:
    assert (REPO / SCHEMA_PATH).read_text(encoding="utf-8") == schema_text(), FIX


def test_generated_docs_tables_are_fresh() -> None:
    text = (REPO / DOCS_PATH).read_text(encoding="utf-8")
    assert updated_docs(text) == text, FIX


def test_schema_declares_draft_2020_12_and_discriminators() -> None:
    schema = json.loads(schema_text())
    assert next(iter(schema)) == "$schema"
    assert schema["$schema"] == SCHEMA_DIALECT
    scheduler = schema["properties"]["traffic_scheduler"]
    assert scheduler["discriminator"]["propertyName"] == "type"
    assert [b["$ref"].rsplit("/", 1)[-1] for b in scheduler["oneOf"]] == [
        "RateScheduler",
        "ConcurrentScheduler",
        "TraceScheduler",
    ]
    # leaving type out selects the default kind; the others must name themselves
    assert "required" not in scheduler["oneOf"][0]
    assert scheduler["oneOf"][1]["required"] == ["type"]
    assert schema["$defs"]["PoissonInterval"]["properties"]["arrival_rate"] == {
        "default": 1.0,
        "description": "Mean events per second.",
        "exclusiveMinimum": 0,
        "title": "Arrival Rate",
        "type": "number",
    }
    assert schema["properties"]["runtime"]["default"]["max_sessions"] == 25


def test_write_schema(tmp_path: Path) -> None:
    target = write_schema(tmp_path / "sub" / "s.json")
    assert target.read_text(encoding="utf-8") == schema_text()


# ------------------------------------------------------------ third-party validation (offline)


def _check_jsonschema(*files: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    assert tool is not None, "check-jsonschema is a test dependency"
    return subprocess.run(
        [tool, "--schemafile", str(REPO / SCHEMA_PATH), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_samples_validate_with_check_jsonschema() -> None:
    files = [*SCENARIOS, *UPSTREAM_SAMPLES]
    assert len(SCENARIOS) == 7
    done = _check_jsonschema(*files)
    assert done.returncode == 0, done.stdout + done.stderr


AGREEMENT_CASES = [
    ("client: {model: m}\n", True),
    ("traffic_scheduler: {interval_generator: {arrival_rate: 2}}\n", True),
    (
        "session_generator: {output_spec: {text: {output_length_generator: "
        "{type: zipf, alpha: 1}}}}",
        True,
    ),
    (
        "session_generator: {output_spec: {text: {output_length_generator: "
        "{type: zipf, theta: 1}}}}",
        True,
    ),
    (
        "session_generator: {output_spec: {text: {output_length_generator: "
        "{type: zipf, theta: 1, alpha: 1}}}}",
        False,
    ),
    ("client: {additional_sampling_params: '{\"top_p\": 1}'}\n", True),
    ("traffic_scheduler: {type: burst}\n", False),
    ("traffic_scheduler: {target_concurrent_sessions: 3}\n", False),
    ("traffic_scheduler: {interval_generator: {arival_rate: 2}}\n", False),
    ("seed: -1\n", False),
    ("evaluators: [{slos: [{name: a, metric: e2e, percentile: 0.5, value: 1}]}]\n", True),
]


def test_schema_agrees_with_the_models(tmp_path: Path) -> None:
    """One check-jsonschema run over every case (fast); each file is judged by both sides."""
    from veeksha.errors import ScenarioError
    from veeksha.scenario.loader import load_scenario_text

    paths = []
    for number, (text, _) in enumerate(AGREEMENT_CASES):
        paths.append(tmp_path / f"case{number}.yaml")
        paths[-1].write_text(text, encoding="utf-8")
    report = _check_jsonschema(*paths).stdout
    for path, (text, valid) in zip(paths, AGREEMENT_CASES, strict=True):
        assert (f"{path}::" not in report) is valid, (text, report)
        try:
            load_scenario_text(text, path.name)
        except ScenarioError:
            assert not valid, text
        else:
            assert valid, text
