"""The scenario's ``labels``: scalars that describe the run (engine, GPU, parallelism), set in
the file or with ``--set labels.KEY=VALUE``, and outside the scenario's hash."""

from __future__ import annotations

from tests.unit.scenario.helpers import load, only_issue
from veeksha.scenario.loader import scenario_hash


def test_labels_are_scalars_and_leave_the_hash() -> None:
    plain = scenario_hash(load("seed: 3"))
    labelled = load("seed: 3\nlabels: {gpu: H100, tp: 2, fp8: true}")
    assert labelled.labels == {"gpu": "H100", "tp": 2, "fp8": True}
    assert scenario_hash(labelled) == plain  # (they describe the run: no request changes)
    assert load("seed: 3", ("labels.engine=vllm",)).labels == {"engine": "vllm"}
    assert only_issue("labels: {gpu: [a, b]}").path.startswith("labels.gpu")
