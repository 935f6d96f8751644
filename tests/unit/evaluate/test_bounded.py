"""The bounded-memory evaluation: streamed samples equal numpy's aggregates bit for bit, and a run
evaluated from its Parquet files a column and a batch at a time writes what the in-memory
evaluation of the same tables writes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.unit.evaluate.builders import request, requests_table, scenario, session, sessions_table
from veeksha.evaluate import evaluate_run
from veeksha.evaluate import metrics as metrics_module
from veeksha.evaluate import source as source_module
from veeksha.evaluate.metrics import LATENCY_METRICS, metric_sample
from veeksha.evaluate.sample import StreamedSample, _pairwise_total, percentile_fractions
from veeksha.evaluate.source import requests_source, sessions_source
from veeksha.evaluate.stats import CSV_PERCENTILES, describe

_RNG = np.random.default_rng(7)
SAMPLES = {
    "latencies": _RNG.exponential(0.02, 30_011) + 0.01,
    "all zero": np.zeros(20_000),
    "few values": _RNG.integers(0, 5, 9_000).astype(float) * 0.1,
    "signs and nan": np.concatenate([_RNG.normal(0, 1, 5_000), [np.nan] * 7, [0.0] * 50]),
    "one": np.array([3.5]),
    "two": np.array([2.0, 1.0]),
    "seven": _RNG.random(7),
}


def _chunked(values: np.ndarray, size: int) -> StreamedSample:
    def chunks() -> Iterator[np.ndarray]:
        return (values[i : i + size] for i in range(0, values.size, size))

    return StreamedSample(chunks, budget=1_000)


@pytest.mark.parametrize("name", sorted(SAMPLES))
@pytest.mark.parametrize("chunk", [97, 4096])
def test_streamed_sample_equals_numpy(name: str, chunk: int) -> None:
    values = SAMPLES[name]
    clean = values[~np.isnan(values)]
    sample = _chunked(values, chunk)
    assert sample.size == clean.size
    assert sample.describe() == describe(clean)
    csv = sample.quantiles(percentile_fractions(CSV_PERCENTILES))
    assert np.array_equal(csv, np.percentile(clean, CSV_PERCENTILES))
    probs = np.linspace(0, 1, min(2000, clean.size))
    assert np.array_equal(sample.quantiles(probs), np.quantile(clean, probs))
    assert sample.quantiles(np.array([0.99]))[0] == np.quantile(clean, 0.99)
    assert sample.median() == np.median(clean)


@pytest.mark.parametrize("n", [1, 7, 8, 128, 129, 1000, 8193, 100_003])
def test_pairwise_total_is_numpys_sum(n: int) -> None:
    values = _RNG.normal(0, 1e3, n) + _RNG.random(n)
    chunks = (values[i : i + 333] for i in range(0, n, 333))
    assert _pairwise_total(chunks, n) == np.add.reduce(values)


def _run_tables(sessions: int) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(3)
    starts = np.cumsum(rng.exponential(0.01, sessions)).tolist()
    rows, session_rows = [request(10**6, ready=0.0, phase="warmup")], []
    for i, t in enumerate(starts):
        gaps = np.cumsum(rng.exponential(0.01, 1 + i % 6)).tolist()
        status = "error" if i % 97 == 0 else "ok"
        first = request(i, 0, ready=t, chunks=[t + 0.05 + g for g in gaps], status=status)
        rows.append(first)
        ready = (first["completed_at"] or t) + 0.01
        chunks = [ready + 0.02 + g for g in gaps[:3]]
        rows.append(request(i, 1, parents=[0], ready=ready, wait=0.01, chunks=chunks))
        session_rows.append(session(i, t, chunks[-1], status=status, num_requests=2))
    return requests_table(rows), sessions_table(session_rows)


def _outputs(run_dir: Path) -> dict[str, str]:
    files = ["summary.json", "health.json", "health.txt", "slo.json"]
    files += [f"metrics/{m.name}.csv" for m in LATENCY_METRICS]
    return {name: (run_dir / name).read_text() for name in files}


def test_run_from_files_in_batches_equals_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests, sessions = _run_tables(3_000)
    scen = scenario(
        evaluators=[
            {
                "type": "performance",
                "slos": [
                    {"name": "tbc", "metric": "tbc", "percentile": 0.9, "value": 0.02},
                    {"name": "ttfc", "metric": "ttfc", "percentile": 0.99, "value": 0.5},
                ],
            }
        ]
    )
    memory_dir, files_dir = tmp_path / "memory", tmp_path / "files"
    files_dir.mkdir()
    pq.write_table(requests, files_dir / "requests.parquet", row_group_size=700)
    pq.write_table(sessions, files_dir / "sessions.parquet", row_group_size=400)
    expected = evaluate_run(memory_dir, scen, requests, sessions, {}, plots=False)

    monkeypatch.setattr(metrics_module, "MAX_HELD_VALUES", 2_000)  # stream every sample
    monkeypatch.setattr(source_module, "BATCH_ROWS", 500)
    source = requests_source(files_dir)
    tbc = next(metric for metric in LATENCY_METRICS if metric.name == "tbc")
    assert isinstance(metric_sample(source, tbc), StreamedSample)
    got = evaluate_run(files_dir, scen, source, sessions_source(files_dir), {}, plots=False)

    assert got.summary == expected.summary
    assert _outputs(files_dir) == _outputs(memory_dir)
    summary = json.loads((files_dir / "summary.json").read_text())
    assert summary["latency"]["tbc"]["count"] > 2_000  # the streamed path had work to do
    assert summary["requests"]["error"] == 31
    assert summary["goodput"]["requests"] < summary["requests"]["ok"]


def test_digest_of_streamed_sample_selects_all_quantiles_in_one_set_of_passes() -> None:
    values = np.zeros(20_000)  # every order statistic needs 4 counting passes (module docstring)
    passes = 0

    def chunks() -> Iterator[np.ndarray]:
        nonlocal passes
        passes += 1
        return (values[i : i + 4096] for i in range(0, values.size, 4096))

    got = metrics_module.digest(StreamedSample(chunks, budget=1_000), "s", (0.99,), 50)
    assert got.stats == describe(values)
    assert got.csv == np.percentile(values, CSV_PERCENTILES).tolist()
    assert np.array_equal(got.cdf, np.quantile(values, np.linspace(0, 1, 50)))
    # sizing (with the first digit's counts), mean, std, then 3 counting passes for everything
    assert passes == 6


def test_many_parts_are_read_from_one_scratch_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed or finishing run's parts/ (a file a second) read column by column opened every
    part per column: the evaluation's ~500 reads cost parts × reads. Over one scratch copy, a
    column read opens one file however many parts the run wrote."""
    requests, _ = _run_tables(1_500)
    parts = tmp_path / "parts" / "requests"
    parts.mkdir(parents=True)
    for i, start in enumerate(range(0, requests.num_rows, 75), 1):  # 41 parts
        pq.write_table(requests.slice(start, 75), parts / f"part-{i:06d}.parquet")
    monkeypatch.setattr(source_module, "SMALL_ROWS", 1_000)  # (not held: read from disk)
    monkeypatch.setattr(source_module, "BATCH_ROWS", 1_024)
    opened: list[Path] = []
    real_open = source_module.ColumnSource._open

    def counting_open(self: source_module.ColumnSource, path: Path) -> pq.ParquetFile:
        opened.append(path)
        return real_open(self, path)

    monkeypatch.setattr(source_module.ColumnSource, "_open", counting_open)
    source = requests_source(tmp_path)
    assert source.num_rows == requests.num_rows
    opened.clear()
    names = ["ttfc", "e2e", "chunk_times", "status", "session_id"]
    for name in names:
        assert source.column(name).to_pylist() == requests.column(name).to_pylist()
    assert len(opened) == len(names)  # one file a read, not 41
    ok = source.filter(_equals(source.column("status"), "ok"))
    opened.clear()
    batches = list(ok.batches("e2e"))
    assert len(opened) == 1
    assert sum(len(b) for b in batches) == ok.num_rows
    scratch = [p for p in parts.iterdir() if p.name.startswith(".evaluate-")]
    assert len(scratch) == 1
    del source, ok, batches
    assert not scratch[0].exists()  # removed with the last source over it
    assert sorted(p.name for p in parts.iterdir())[0] == "part-000001.parquet"


def _equals(column: pa.ChunkedArray, value: str) -> np.ndarray:
    return np.array([v == value for v in column.to_pylist()])


def test_parts_are_read_as_they_are_where_no_scratch_copy_can_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests, _ = _run_tables(300)
    parts = tmp_path / "parts" / "requests"
    parts.mkdir(parents=True)
    for i, start in enumerate(range(0, requests.num_rows, 50), 1):
        pq.write_table(requests.slice(start, 50), parts / f"part-{i:06d}.parquet")
    monkeypatch.setattr(source_module, "SMALL_ROWS", 100)

    def read_only(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError("read-only folder")

    monkeypatch.setattr(source_module.tempfile, "mkstemp", read_only)
    source = requests_source(tmp_path)
    assert len(source._files) == len(list(parts.iterdir()))  # the parts themselves
    assert source.column("e2e").to_pylist() == requests.column("e2e").to_pylist()
