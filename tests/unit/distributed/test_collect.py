"""The shard's pulls and the driver's local copy (``veeksha.distributed.collect``): real files;
the driver's pull loop (``driver._follow`` over ``pulls.PullRounds``) with fake shards and a
fake Ray on a fake clock."""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from veeksha.distributed import driver
from veeksha.distributed.collect import LocalCopy, Pull, ShardFiles
from veeksha.distributed.lost import SHARD_LOST, lost_request_rows
from veeksha.distributed.pulls import MISSED_PULLS
from veeksha.distributed.run_folder import shard_result
from veeksha.distributed.shard import silent_s
from veeksha.errors import ConfigurationError
from veeksha.record.reader import pending_work


def _part(folder: Path, table: str, n: int, column: str, values: list[int]) -> None:
    path = folder / "parts" / table / f"part-{n:06d}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({column: pa.array(values, pa.int64())}), path)


def _trace(folder: Path, *lines: dict[str, int], partial: str = "") -> None:
    with (folder / "trace.jsonl").open("a") as file:
        file.writelines(json.dumps(line) + "\n" for line in lines)
        file.write(partial)


def test_pulls_carry_each_part_once_and_whole_trace_lines_only(tmp_path: Path) -> None:
    shard, copy = tmp_path / "shard", LocalCopy(tmp_path / "copy")
    shard.mkdir()
    files = ShardFiles(shard)
    _part(shard, "requests", 1, "request_id", [0])
    _trace(shard, {"session_id": 0, "request_id": 0}, partial='{"session_id": 1, "req')
    first = files.next_pull()
    assert list(first.files) == ["parts/requests/part-000001.parquet"]
    assert first.trace.count(b"\n") == 1  # the half-written line waits for the next pull
    copy.apply(first)
    with (shard / "trace.jsonl").open("a") as file:
        file.write('uest_id": 1}\n')
    _part(shard, "requests", 2, "request_id", [])
    second = files.next_pull()
    assert list(second.files) == ["parts/requests/part-000002.parquet"]
    assert second.trace == b'{"session_id": 1, "request_id": 1}\n'
    copy.apply(second)
    assert (copy.folder / "trace.jsonl").read_bytes() == (shard / "trace.jsonl").read_bytes()
    assert files.next_pull().files == {}

    # request 1 was dispatched and has no row: in flight; sessions 0 and 1 started
    in_flight, started = pending_work(copy.folder)
    assert [entry["request_id"] for entry in in_flight] == [1]
    assert started.tolist() == [0, 1]


def test_a_final_pull_replaces_the_parts_with_the_finished_files(tmp_path: Path) -> None:
    shard, copy = tmp_path / "shard", LocalCopy(tmp_path / "copy")
    shard.mkdir()
    files = ShardFiles(shard)
    _part(shard, "requests", 1, "request_id", [0, 1])
    copy.apply(files.next_pull())
    # the engine finished: parts merged into the final files and deleted
    for path in (shard / "parts").rglob("*.parquet"):
        path.unlink()
    pq.write_table(
        pa.table({"request_id": pa.array([0, 1], pa.int64())}), shard / "requests.parquet"
    )
    pq.write_table(pa.table({"session_id": pa.array([0], pa.int64())}), shard / "sessions.parquet")
    (shard / "summary.json").write_text("{}")
    final = files.next_pull(final=True)
    assert set(final.files) == {"requests.parquet", "sessions.parquet", "summary.json"}
    final.outcome = {"interrupted": False}
    copy.apply(final)
    assert not (copy.folder / "parts").exists()
    assert (copy.folder / "summary.json").exists()
    assert copy.outcome == {"interrupted": False}
    in_flight, started = pending_work(copy.folder)
    assert (in_flight, started.tolist()) == ([], [0])


def test_a_file_larger_than_a_chunk_arrives_whole_and_identical_in_pieces(tmp_path: Path) -> None:
    shard, copy = tmp_path / "shard", LocalCopy(tmp_path / "copy")
    shard.mkdir()
    files = ShardFiles(shard, chunk_bytes=1000)
    big = b"".join(hashlib.sha256(bytes([i])).digest() for i in range(79))[:2500]
    (shard / "requests.parquet").write_bytes(big)
    (shard / "run.log").write_bytes(b"x" * 900)
    (shard / "summary.json").write_bytes(b"{}" * 100)  # 900 + 200 bytes: over the inline budget
    final = files.next_pull(final=True)
    assert final.chunked == {"requests.parquet": 2500, "summary.json": 200}
    assert set(final.files) == {"run.log"}
    with pytest.raises(ValueError, match="fetch"):
        LocalCopy(tmp_path / "other").apply(final)
    asked: list[tuple[str, int, int]] = []

    def fetch(name: str, offset: int, length: int) -> bytes:
        piece = files.read_chunk(name, offset, length)
        asked.append((name, offset, len(piece)))
        return piece

    copy.apply(final, fetch)
    assert (copy.folder / "requests.parquet").read_bytes() == big
    assert (copy.folder / "summary.json").read_bytes() == b"{}" * 100
    assert (copy.folder / "run.log").read_bytes() == b"x" * 900
    assert asked == [
        ("requests.parquet", 0, 1000),
        ("requests.parquet", 1000, 1000),
        ("requests.parquet", 2000, 500),
        ("summary.json", 0, 200),
    ]
    assert copy.chunks == 4
    assert not list(copy.folder.glob(".*.tmp"))
    with pytest.raises(KeyError):  # only the files a final pull named are served
        files.read_chunk("run.log", 0, 10)


def test_a_lost_shards_account_adds_the_trace_lines_its_last_snapshot_missed(
    tmp_path: Path,
) -> None:
    """The snapshot (up to 0.5 s old) named request 3 in flight; request 5 was dispatched after
    it and request 7 answered with a row never pulled: each gets a shard_lost row, request 1
    (its row came) does not, and no request is named twice."""
    folder = tmp_path / "copy"
    _part(folder, "requests", 1, "request_id", [1])
    _part(folder, "sessions", 1, "session_id", [])
    line = {"node_id": 0, "phase": "measured"}
    _trace(folder, *({**line, "session_id": i, "request_id": i} for i in (1, 3, 5)))
    _trace(folder, {**line, "session_id": 7, "request_id": 7, "agent": "pro", "round": 1})
    snapshot = {"in_flight": [{**line, "session_id": 3, "request_id": 3, "model": "m"}]}
    shard = SimpleNamespace(
        spec=SimpleNamespace(index=1),
        copy=SimpleNamespace(folder=folder, snapshot=snapshot),
        offset_before=None,
        offset_after=None,
        lost="ActorDiedError",
        lost_at_wall_ns=1,
    )
    result = shard_result(shard)  # type: ignore[arg-type]
    assert [(e["request_id"], e.get("model")) for e in result.in_flight] == [
        (3, "m"),  # (the snapshot's own entry, with what the engine knew)
        (5, None),
        (7, None),
    ]
    rows = lost_request_rows(result, "run", {(1, 0, 0)}, 0.0, 2.0)
    assert [r["request_id"] for r in rows] == [3, 5, 7]
    assert {r["error_kind"] for r in rows} == {SHARD_LOST}
    assert [(r["agent"], r["round"]) for r in rows] == [(None, None), (None, None), ("pro", 1)]
    # a finished shard: its folder holds it all, nothing is in flight, and its trace (a line
    # per request: seconds and hundreds of MB of the driver's for a million) is not read
    shard.lost = None
    (folder / "trace.jsonl").write_text("not json: never read\n")
    finished = shard_result(shard)  # type: ignore[arg-type]
    assert finished.in_flight == []
    assert finished.started_sessions is None  # (unknown: the merge takes its rows' ids)


# --------------------------------------------------------------- the driver's pull loop


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass(eq=False)
class _Ref:
    owner: _Shard
    ready_at: float
    value: Pull


@dataclass(eq=False)
class _Shard:
    """A shard actor whose n-th pull answers ``delays[n]`` s after it was issued (the last delay
    for every later one; ``math.inf``: never) and says its engine ended at pull ``pulls``."""

    clock: _Clock
    delays: list[float]
    pulls: int
    frozen_at: float = math.inf  # its engine process's last beat (then stopped) on the clock
    issued: list[float] = field(default_factory=list)
    answered: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pull = SimpleNamespace(remote=self._pull)
        self.stop = SimpleNamespace(remote=lambda: None)

    def _pull(self) -> _Ref:
        self.issued.append(self.clock.now)
        n = len(self.issued)
        delay = self.delays[min(n, len(self.delays)) - 1]
        silent = max(0.0, self.clock.now - self.frozen_at)  # (as of the pull's issue: close)
        return _Ref(self, self.clock.now + delay, Pull(running=n < self.pulls, silent_s=silent))


class _RayError(Exception):
    pass


class _FakeRay:
    """``ray.wait`` and ``ray.get`` over :class:`_Ref` on the fake clock: waiting moves the
    clock to the first answer, or by the whole timeout."""

    exceptions = SimpleNamespace(
        RayError=_RayError,
        GetTimeoutError=type("GetTimeoutError", (_RayError,), {}),
        ActorUnavailableError=type("ActorUnavailableError", (_RayError,), {}),
    )

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock

    def wait(self, refs: list[_Ref], num_returns: int, timeout: float) -> Any:
        assert num_returns == 1
        first = min(refs, key=lambda ref: ref.ready_at)
        if first.ready_at <= self.clock.now + timeout:
            self.clock.now = max(self.clock.now, first.ready_at)
            return [first], [ref for ref in refs if ref is not first]
        self.clock.now += timeout
        return [], refs

    def get(self, ref: _Ref, timeout: float) -> Pull:
        assert ref.ready_at <= self.clock.now
        ref.owner.answered.append(self.clock.now)
        return ref.value


def test_a_hung_shard_delays_no_other_shard_and_is_lost_after_its_missed_pulls(
    tmp_path: Path,
) -> None:
    clock = _Clock()
    hung = _Shard(clock, [math.inf], pulls=1000)
    fast = _Shard(clock, [0.25], pulls=40)
    slow = _Shard(clock, [2.5, 0.25], pulls=5)  # its first answer takes 2.5 rounds
    shards = [
        driver.ShardState(i, actor, LocalCopy(tmp_path / f"shard-{i}"))
        for i, actor in enumerate((hung, fast, slow))
    ]
    driver._follow(
        _FakeRay(clock),  # type: ignore[arg-type]
        shards,
        1.0,
        driver._Interrupts(),
        lambda line: None,
        clock=clock,
        sleep=clock.sleep,
    )
    # the fast shard is pulled at the start of every round and answered 0.25 s later
    assert fast.issued == [float(n) for n in range(40)]
    assert fast.answered == [n + 0.25 for n in range(40)]
    assert not shards[1].running
    assert shards[1].lost is None
    # the hung one: one pull, never a second queued behind it; lost after MISSED_PULLS rounds
    assert hung.issued == [0.0]
    assert shards[0].lost == f"no answer to pulls for {MISSED_PULLS} pulls in a row"
    # the slow one answered in round 3, was pulled again in round 4, and was not lost
    assert slow.issued == [0.0, 3.0, 4.0, 5.0, 6.0]
    assert slow.answered == [2.5, 3.25, 4.25, 5.25, 6.25]
    assert shards[2].lost is None
    assert shards[2].missed == 0
    assert not shards[2].running
    assert [s.copy.pulls for s in shards] == [0, 40, 5]


def test_a_shard_whose_engine_stops_beating_is_lost_though_its_actor_answers(
    tmp_path: Path,
) -> None:
    """A frozen engine process (SIGSTOP) leaves its actor answering every pull: the pulls say
    how long the engine has been silent, and the driver loses the shard at the limit (before,
    it waited for it for ever), counting the loss from its last beat."""
    clock = _Clock()
    frozen = _Shard(clock, [0.1], pulls=1000, frozen_at=4.5)
    other = _Shard(clock, [0.1], pulls=20)
    shards = [
        driver.ShardState(i, actor, LocalCopy(tmp_path / f"shard-{i}"))
        for i, actor in enumerate((frozen, other))
    ]
    driver._follow(
        _FakeRay(clock),  # type: ignore[arg-type]
        shards,
        1.0,
        driver._Interrupts(),
        lambda line: None,
        silence_s=10.0,
        clock=clock,
        sleep=clock.sleep,
    )
    # silent 10 s at the pull of t = 15 (last beat at 4.5): lost then, and pulled no more
    assert frozen.issued == [float(n) for n in range(16)]
    assert shards[0].lost == (
        "its engine process showed no sign of life for 10 s (stopped or stuck) and was ended"
    )
    assert shards[0].engine_silent
    assert shards[0].lost_at_wall_ns is not None
    # the other shard ran to its end, untouched
    assert shards[1].lost is None
    assert not shards[1].running
    assert not shards[1].engine_silent


def test_an_engines_silence_is_the_age_of_its_heartbeat(tmp_path: Path) -> None:
    beat = tmp_path / "heartbeat"
    assert silent_s(beat, 1000.0) is None  # (no beat yet)
    beat.touch()
    os.utime(beat, (990.0, 990.0))
    assert silent_s(beat, 1000.0) == 10.0
    assert silent_s(beat, 985.0) == 0.0  # (clock steps: never negative)


def test_the_engine_silence_limit_comes_from_the_environment_or_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario = SimpleNamespace(runtime=SimpleNamespace(distributed=None))
    settings = driver.settings_for(scenario, "local")
    assert settings is not None
    assert settings.engine_silence_s == driver.ENGINE_SILENCE_S == 30.0
    monkeypatch.setenv(driver.SILENCE_ENV, "2.5")
    assert driver.settings_for(scenario, "local").engine_silence_s == 2.5  # type: ignore[union-attr]
    for bad in ("30s", "0", "-1", "nan", "inf"):
        monkeypatch.setenv(driver.SILENCE_ENV, bad)
        with pytest.raises(ConfigurationError, match="VEEKSHA_RAY_ENGINE_SILENCE_S"):
            driver.settings_for(scenario, "local")


def test_the_piece_size_comes_from_the_environment_or_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario = SimpleNamespace(runtime=SimpleNamespace(distributed=None))
    settings = driver.settings_for(scenario, "local")
    assert settings is not None
    assert settings.chunk_bytes == 8 * 1024 * 1024
    monkeypatch.setenv(driver.CHUNK_ENV, "4096")
    assert driver.settings_for(scenario, "local").chunk_bytes == 4096  # type: ignore[union-attr]
    for bad in ("8M", "0"):
        monkeypatch.setenv(driver.CHUNK_ENV, bad)
        with pytest.raises(ConfigurationError, match="VEEKSHA_RAY_CHUNK_BYTES"):
            driver.settings_for(scenario, "local")
