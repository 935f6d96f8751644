"""A results-writer failure that is not the disk's: the run stops with a truthful message, and
what was written is still evaluated and finalised (docs/reliability.md §4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from veeksha.engine.run import run_scenario
from veeksha.errors import RunAbortedError
from veeksha.record.columnar import RequestColumns
from veeksha.record.reader import load_requests, read_metadata
from veeksha.scenario.loader import load_scenario_text

SCENARIO = """
seed: 5
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.01}}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
  channels: [{type: text, body_length_generator: {type: fixed, value: 8}}]
  output_spec: {text: {output_length_generator: {type: fixed, value: 4}}}
runtime: {max_sessions: 400, benchmark_timeout: 30}
evaluators: [{type: performance, stream_metrics: false}]
"""


def test_a_conversion_failure_stops_the_run_and_the_parts_are_evaluated_and_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    convert = RequestColumns.to_table
    calls = []

    def second_fails(self: RequestColumns, *args: Any, **kwargs: Any) -> Any:
        calls.append(self.rows)
        if len([rows for rows in calls if rows]) == 2:
            raise OverflowError("Python int too large to convert to C long")
        return convert(self, *args, **kwargs)

    monkeypatch.setattr(RequestColumns, "to_table", second_fails)
    run_dir = tmp_path / "run"
    scenario = load_scenario_text(SCENARIO, "test.yaml")
    with pytest.raises(RunAbortedError) as info:
        run_scenario(scenario, run_dir, quiet=True, dry_run=True, plots=False)
    message = str(info.value)
    assert "could not convert" in message
    assert "cannot write results" not in message
    assert (run_dir / "requests.parquet").exists()  # merged from the parts
    assert not (run_dir / "parts").exists()
    assert (run_dir / "summary.json").exists()  # evaluated
    assert (run_dir / "health.json").exists()
    metadata = read_metadata(run_dir)
    assert metadata["interrupted"] == "true"
    assert metadata["partial"] == "false"
    assert 0 < load_requests(run_dir).num_rows < 400
