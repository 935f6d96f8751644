"""Affinity plans on fake topologies."""

from __future__ import annotations

from pathlib import Path

import pytest

from veeksha.dispatch.affinity import (
    Topology,
    default_num_workers,
    parse_cpulist,
    plan_affinity,
    read_topology,
)
from veeksha.errors import ConfigurationError

TWO_NODES = Topology(cpus=tuple(range(8)), nodes=((0, 1, 2, 3), (4, 5, 6, 7)))


def test_parse_cpulist() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []


def test_auto_fills_primary_node_then_spills() -> None:
    plan = plan_affinity("auto", 5, TWO_NODES)
    assert plan.main_cpus == [0]
    assert plan.worker_cpus == [[1], [2], [3], [4], [5]]


def test_auto_shares_round_robin_when_workers_outnumber_spare_cpus() -> None:
    plan = plan_affinity("auto", 9, TWO_NODES)
    assert plan.worker_cpus == [[1], [2], [3], [4], [5], [6], [7], [1], [2]]


def test_auto_primary_node_is_the_first_usable_one() -> None:
    # A cpuset that excludes node 0 entirely: main goes to node 1's first CPU.
    topo = Topology(cpus=(5, 6, 9), nodes=((5, 6), (9,)))
    plan = plan_affinity("auto", 2, topo)
    assert plan.main_cpus == [5]
    assert plan.worker_cpus == [[6], [9]]


def test_single_cpu_everyone_shares_it() -> None:
    plan = plan_affinity("auto", 3, Topology(cpus=(2,), nodes=((2,),)))
    assert plan.main_cpus == [2]
    assert plan.worker_cpus == [[2], [2], [2]]


def test_off_pins_nothing() -> None:
    plan = plan_affinity("off", 2, TWO_NODES)
    assert plan.main_cpus == []
    assert plan.worker_cpus == [[], []]


def test_explicit_list() -> None:
    plan = plan_affinity([3, 6, 7], 3, TWO_NODES)
    assert plan.main_cpus == [3]
    assert plan.worker_cpus == [[6], [7], [6]]
    assert plan_affinity([4], 2, TWO_NODES).worker_cpus == [[4], [4]]


def test_explicit_list_must_be_usable() -> None:
    with pytest.raises(ConfigurationError, match=r"\[9\]"):
        plan_affinity([1, 9], 1, TWO_NODES)


def test_default_num_workers() -> None:
    assert default_num_workers(TWO_NODES) == 7
    assert default_num_workers(Topology(cpus=(0,), nodes=((0,),))) == 1
    assert default_num_workers() >= 1


def test_read_topology_from_a_fake_sysfs(tmp_path: Path) -> None:
    import os

    usable = sorted(os.sched_getaffinity(0))
    (tmp_path / "node0").mkdir()
    (tmp_path / "node0" / "cpulist").write_text(f"{usable[0]}\n")
    (tmp_path / "node1").mkdir()
    (tmp_path / "node1" / "cpulist").write_text("100000-100003\n")  # not usable here
    (tmp_path / "possible").write_text("0-1\n")
    topo = read_topology(tmp_path)
    assert topo.cpus == tuple(usable)
    assert topo.nodes[0] == (usable[0],)
    assert sorted(c for node in topo.nodes for c in node) == usable  # leftovers in a last node


def test_read_topology_without_numa_info(tmp_path: Path) -> None:
    topo = read_topology(tmp_path / "missing")
    assert topo.nodes == (topo.cpus,)
