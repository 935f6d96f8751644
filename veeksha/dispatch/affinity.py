"""CPU affinity plan: which CPUs the main process and each worker run on.

Vocabulary: the *usable* CPUs are the ones this process may run on (``sched_getaffinity``: online
CPUs inside the cgroup cpuset); a *node* is a NUMA node (``/sys/devices/system/node/node*``), its
CPUs restricted to the usable ones; the *primary* node is the first node with a usable CPU.

``auto``: the main process gets the first CPU of the primary node; the workers get the remaining
CPUs of the primary node, then the other nodes' CPUs in node order, one CPU each. With fewer
spare CPUs than workers they share them round-robin; with no spare CPU at all they share the main
process' CPU. ``off``: nobody is pinned (empty lists). An explicit list: the first CPU is the main
process', the rest are shared round-robin by the workers (every id must be usable).

Worked example, two nodes {0-3} and {4-7}, all usable, 5 workers:
main [0]; workers [1], [2], [3], [4], [5]. With 9 workers: [1] ... [7], then [1], [2].
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from veeksha.errors import ConfigurationError

__all__ = [
    "AffinityPlan",
    "Topology",
    "default_num_workers",
    "parse_cpulist",
    "pin_current_process",
    "plan_affinity",
    "read_topology",
]

_NODE_ROOT = Path("/sys/devices/system/node")


@dataclass(frozen=True, slots=True)
class Topology:
    """Usable CPUs (sorted) and the NUMA nodes' usable CPUs (each sorted, none empty)."""

    cpus: tuple[int, ...]
    nodes: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class AffinityPlan:
    """CPU sets to pin to; an empty list means "do not pin"."""

    main_cpus: list[int]
    worker_cpus: list[list[int]]


def parse_cpulist(text: str) -> list[int]:
    """Parse the kernel's cpulist format, e.g. ``"0-3,8,10-11"``."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.extend(range(int(lo), int(hi) + 1))
        else:
            cpus.append(int(part))
    return cpus


def read_topology(node_root: Path = _NODE_ROOT) -> Topology:
    """This process' usable CPUs and NUMA nodes (one node holding all CPUs when /sys has none)."""
    usable = sorted(os.sched_getaffinity(0))
    nodes: list[tuple[int, ...]] = []
    allowed = set(usable)
    node_dirs = sorted(
        (p for p in node_root.glob("node[0-9]*") if p.name[4:].isdigit()),
        key=lambda p: int(p.name[4:]),
    )
    for node_dir in node_dirs:
        try:
            cpus = parse_cpulist((node_dir / "cpulist").read_text())
        except OSError:
            continue
        mine = tuple(sorted(c for c in cpus if c in allowed))
        if mine:
            nodes.append(mine)
    covered = {c for node in nodes for c in node}
    leftover = tuple(c for c in usable if c not in covered)
    if leftover:
        nodes.append(leftover)
    return Topology(cpus=tuple(usable), nodes=tuple(nodes))


def default_num_workers(topology: Topology | None = None) -> int:
    """One worker per usable CPU beyond the main process', at least one."""
    cpus = topology.cpus if topology is not None else tuple(os.sched_getaffinity(0))
    return max(1, len(cpus) - 1)


def plan_affinity(
    setting: Literal["auto", "off"] | Sequence[int],
    num_workers: int,
    topology: Topology | None = None,
) -> AffinityPlan:
    """The plan for ``runtime.cpu_affinity`` (see the module docstring); pure given a topology."""
    if num_workers < 1:
        raise ValueError("num_workers must be at least 1")
    if setting == "off":
        return AffinityPlan(main_cpus=[], worker_cpus=[[] for _ in range(num_workers)])
    topo = topology if topology is not None else read_topology()
    if setting == "auto":
        order = [c for node in topo.nodes for c in node] or list(topo.cpus)
        main, spare = order[0], order[1:]
    else:
        explicit = list(setting)
        if not explicit:
            raise ConfigurationError("runtime.cpu_affinity: an explicit list needs at least 1 CPU")
        unusable = sorted(set(explicit) - set(topo.cpus))
        if unusable:
            raise ConfigurationError(
                f"runtime.cpu_affinity: CPU(s) {unusable} are not available to this process "
                f"(usable: {list(topo.cpus)})"
            )
        main, spare = explicit[0], explicit[1:]
    if not spare:
        spare = [main]
    workers = [[spare[i % len(spare)]] for i in range(num_workers)]
    return AffinityPlan(main_cpus=[main], worker_cpus=workers)


def pin_current_process(cpus: Sequence[int]) -> None:
    """Pin the calling process to ``cpus``; an empty sequence leaves it as it is."""
    if cpus:
        os.sched_setaffinity(0, list(cpus))
