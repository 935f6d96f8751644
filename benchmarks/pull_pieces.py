"""The final pull of a distributed run: the driver's peak memory and CPU to copy a shard's large
file, whole (one piece: what the driver did before pieces) against pieces of 8 MiB.

    python -m benchmarks.pull_pieces [--mib 128] [--repeats 5] [--append]

A shard folder holds one ``--mib`` MiB ``requests.parquet`` (incompressible bytes); each
repetition makes the final pull (``collect.ShardFiles``) and applies it to a driver's copy
(``collect.LocalCopy``), fetching the pieces by direct calls (Ray's transport is not measured:
``ray.get`` of a bytes object gives the driver a new bytes object of the piece's size, as a
read here does). Peak: the largest Python allocation total during the apply
(``tracemalloc``); CPU: ``time.process_time``. Medians of ``--repeats``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from benchmarks.harness import machine
from benchmarks.report import append
from veeksha.distributed.collect import CHUNK_BYTES, LocalCopy, ShardFiles

_MIB = 1024 * 1024


def _copy_once(shard: Path, copy_dir: Path, chunk_bytes: int) -> tuple[float, float]:
    """(peak MiB, CPU s) of one final pull applied to a fresh copy."""
    files = ShardFiles(shard, chunk_bytes=chunk_bytes)
    copy = LocalCopy(copy_dir)
    tracemalloc.start()
    cpu = time.process_time()
    final = files.next_pull(final=True)
    copy.apply(final, files.read_chunk)
    cpu = time.process_time() - cpu
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert (copy_dir / "requests.parquet").stat().st_size == (
        shard / "requests.parquet"
    ).stat().st_size
    return peak / _MIB, cpu


def main() -> None:
    """Measure, print, append to BENCHMARKS.md (with --append)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--append", action="store_true", help="append to BENCHMARKS.md")
    args = parser.parse_args()
    size = args.mib * _MIB
    ways = {"whole (one piece)": size, f"pieces of {CHUNK_BYTES // _MIB} MiB": CHUNK_BYTES}
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    with tempfile.TemporaryDirectory(prefix="veeksha-pieces-") as tmp:
        shard = Path(tmp) / "shard"
        shard.mkdir()
        with (shard / "requests.parquet").open("wb") as file:
            for _ in range(args.mib):
                file.write(os.urandom(_MIB))
        for n in range(args.repeats):
            for name, chunk in ways.items():
                samples[name].append(_copy_once(shard, Path(tmp) / f"copy-{n}-{chunk}", chunk))
    rows = ["| final pull | driver peak (MiB) | CPU (s) |", "|---|---:|---:|"]
    for name, figures in samples.items():
        peak = statistics.median(f[0] for f in figures)
        cpu = statistics.median(f[1] for f in figures)
        rows.append(f"| {name} | {peak:.1f} | {cpu:.3f} |")
    text = "\n".join(
        [
            "## Distributed runs: the final pull in pieces (benchmarks/pull_pieces.py)",
            "",
            machine().line(),
            "",
            f"One {args.mib} MiB file from a shard's folder to the driver's copy, medians of"
            f" {args.repeats}:",
            "",
            *rows,
            "",
        ]
    )
    print(text)
    if args.append:
        append(text)


if __name__ == "__main__":
    main()
