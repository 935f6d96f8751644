"""Shard actors are named per run, never per second: two runs of one scenario started in the same
second on one shared cluster (two drivers, two output folders) take names of their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from veeksha.distributed.driver import NAMESPACE, _start_actors


class _Call:
    def __init__(self, value: Any) -> None:
        self.value = value

    def remote(self, *args: Any) -> Any:
        return self.value


class _Actor:
    node_id = _Call("node-a")
    ready = _Call(True)


class _FakeRay:
    """What ``_start_actors`` asks of Ray; a name taken in a namespace is refused as Ray's GCS
    refuses it (``ActorAlreadyExistsError``, a ``ValueError``)."""

    def __init__(self) -> None:
        self.names: list[tuple[str, str]] = []

    def remote(self, cls: type) -> _FakeRay:
        return self

    def options(self, *, name: str, namespace: str, **settings: Any) -> _Call:
        if (namespace, name) in self.names:
            raise ValueError(f"The name {name} (namespace={namespace}) is already taken")
        self.names.append((namespace, name))
        return _Call(_Actor())

    def get(self, refs: list[Any], timeout: float | None = None) -> list[Any]:
        return list(refs)


def test_two_runs_with_one_folder_name_get_actor_names_of_their_own(tmp_path: Path) -> None:
    pytest.importorskip("ray")  # (the scheduling strategy is Ray's own class)
    ray = _FakeRay()
    name = "20260102T030405Z-3f2a9c1b7d"  # the same second, the same scenario
    first = _start_actors(ray, object(), 2, tmp_path / "a" / name, 1 << 20)  # type: ignore[arg-type]
    second = _start_actors(ray, object(), 2, tmp_path / "b" / name, 1 << 20)  # type: ignore[arg-type]
    assert len(first) == len(second) == 2
    assert len(set(ray.names)) == 4
    for namespace, actor in ray.names:
        assert namespace == NAMESPACE
        assert actor.startswith(f"veeksha-{name}-")
    assert [n.rsplit("-", 1)[1] for _, n in ray.names] == ["0", "1", "0", "1"]
