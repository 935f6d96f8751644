"""The driver of a distributed run: one experiment on the shards of a Ray cluster.

``run_distributed`` connects to a cluster (``auto``, ``host:port``, or ``local``: a cluster of
its own on 127.0.0.1, stopped after), reserves one bundle per shard in a placement group
(``SPREAD``: the shards on different nodes as far as the cluster allows), starts one
:class:`~veeksha.distributed.shard.ShardActor` in each, and then:

1. **clock**: starts every shard's engine and waits until each is set up (a barrier), measures
   each shard's offset to the driver's wall clock (``_PROBES`` round trips,
   ``clock.estimate_offset``), picks t0 = the driver's wall time now + ``start_margin_s``, and
   sends each shard t0 on its own clock; every shard's engine starts its timeline there;
2. **collection**: every ``pull_interval_s`` pulls each shard's new Parquet parts and trace
   lines into a local copy per shard (``collect.LocalCopy``), every shard's pull at once and
   the answers taken as they come (``pulls.PullRounds``: a slow or hung shard delays no other);
   Ray carries these and the control calls, never a request;
3. **end**: when every shard's engine has ended (or was lost), pulls the rest (large files in
   pieces of ``collect.CHUNK_BYTES``), measures the
   offsets again, and merges the copies into the run folder (``merge.merge_shards``), which is
   then evaluated like a single-host run's.

A shard lost mid-run (its actor or node died, or its engine process ended without a result:
killed, crashed) keeps what was pulled of it and is marked lost; the others go on; the run
ends with exit 3. Ctrl-C stops every shard's engine as Ctrl-C stops
``veeksha run`` (a second Ctrl-C: as a second one) and collects what they wrote.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from veeksha.distributed.collect import CHUNK_BYTES, LocalCopy, Pull
from veeksha.distributed.pulls import MISSED_PULLS, PullRounds
from veeksha.distributed.ray_api import import_ray
from veeksha.distributed.run_folder import SHARDS_DIR, SHARDS_FILE, merge_and_evaluate
from veeksha.distributed.shard import ShardActor, engine_died
from veeksha.errors import ConfigurationError, RunAbortedError
from veeksha.terminal import stop_signals

__all__ = [
    "NAMESPACE",
    "SHARDS_FILE",
    "DistributedSettings",
    "ShardState",
    "actor_name",
    "connect",
    "run_distributed",
    "settings_for",
]

_PROBES = 16
_NS = 1_000_000_000
_CONNECT_TIMEOUT_S = 60.0
_PLACE_TIMEOUT_S = 60.0
_READY_TIMEOUT_S = 120.0
_SETUP_TIMEOUT_S = 300.0
_CALL_TIMEOUT_S = 30.0
_FINISH_TIMEOUT_S = 120.0
CHUNK_ENV = "VEEKSHA_RAY_CHUNK_BYTES"
#: a running shard whose engine process has not beaten for this long is frozen: lost
ENGINE_SILENCE_S = 30.0
SILENCE_ENV = "VEEKSHA_RAY_ENGINE_SILENCE_S"
NAMESPACE = "veeksha"


@dataclass(frozen=True)
class DistributedSettings:
    """Where and how a run is spread: the cluster's address, shards, worker processes each."""

    address: str = "auto"
    shards: int | None = None  # None: one per alive node
    workers_per_shard: int | None = None  # None: the scenario's runtime.num_workers
    start_margin_s: float = 0.5  # t0 this far after every shard was set up
    pull_interval_s: float = 1.0
    chunk_bytes: int = CHUNK_BYTES  # the final pull's pieces ($VEEKSHA_RAY_CHUNK_BYTES)
    # a running engine silent this long is lost ($VEEKSHA_RAY_ENGINE_SILENCE_S)
    engine_silence_s: float = ENGINE_SILENCE_S


def actor_name(run_name: str, index: int, token: str) -> str:
    """The Ray name of a run's shard actor (in namespace :data:`NAMESPACE`): its run folder's
    name, a token of this run's own (``_start_actors``), its index. (Without the token, two
    runs of one scenario started in the same second on one cluster, from two drivers or two
    output folders, had one name: the second crashed on Ray's ``ActorAlreadyExistsError``.)"""
    return f"veeksha-{run_name}-{token}-shard-{index}"


def settings_for(scenario: Any, ray_address: str | None) -> DistributedSettings | None:
    """The run's distribution: ``--ray [ADDRESS]`` (``ray_address``) over the scenario's
    ``runtime.distributed``; None when neither asks for one (a normal run)."""
    config = getattr(scenario.runtime, "distributed", None)
    if config is None and ray_address is None:
        return None
    address = ray_address or (getattr(config, "address", None) if config else None) or "auto"
    return DistributedSettings(
        address=str(address),
        shards=getattr(config, "shards", None) if config else None,
        workers_per_shard=getattr(config, "workers_per_shard", None) if config else None,
        chunk_bytes=_chunk_bytes(),
        engine_silence_s=_engine_silence_s(),
    )


def _chunk_bytes() -> int:
    """:data:`~veeksha.distributed.collect.CHUNK_BYTES`, or ``$VEEKSHA_RAY_CHUNK_BYTES``."""
    return int(_env_number(CHUNK_ENV, CHUNK_BYTES, int, "a number of bytes of at least 1"))


def _engine_silence_s() -> float:
    """:data:`ENGINE_SILENCE_S`, or ``$VEEKSHA_RAY_ENGINE_SILENCE_S``."""
    return _env_number(SILENCE_ENV, ENGINE_SILENCE_S, float, "a positive number of seconds")


def _env_number(name: str, default: float, parse: Callable[[str], float], wanted: str) -> float:
    """The positive, finite number in ``$name`` (``default`` when unset or empty)."""
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        number = parse(value)
    except ValueError:
        number = math.nan
    if not 0 < number < math.inf:
        raise ConfigurationError(f"{name}={value!r}: give {wanted}")
    return number


@dataclass
class ShardState:
    """The driver's view of one shard while the run goes."""

    index: int
    actor: Any
    copy: LocalCopy
    spec: Any = None
    node_id: str = ""
    offset_before: Any = None
    offset_after: Any = None
    lost: str | None = None
    lost_at_wall_ns: int | None = None
    # the first pull that found its engine ended: when its answer came
    ended_at_wall_ns: int | None = None
    # its engine ended without a result (killed, crashed): lost, though its actor answers
    engine_died: bool = False
    # its engine process stopped beating (frozen): lost, though its actor answers
    engine_silent: bool = False
    running: bool = True
    missed: int = 0
    final: Pull | None = None
    stops: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class _Interrupts:
    """Counts SIGINT, SIGTERM and SIGHUP while installed (the driver's loop polls it)."""

    def __init__(self) -> None:
        self.count = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Interrupts:
        for sig in stop_signals():  # (SIGHUP too: the terminal closed; not after nohup)
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1


def run_distributed(
    scenario: Any,
    run_dir: Path,
    settings: DistributedSettings,
    *,
    quiet: bool = False,
    plots: bool = True,
    echo: Callable[[str], None] | None = None,
) -> int:
    """Run ``scenario`` on a Ray cluster into ``run_dir``; returns ``veeksha run``'s exit code.
    What the driver says (the shards' placement, the wait for a server, the cache reset, the
    progress) is printed and kept for the merged run.log, before the shards' own lines."""
    shown = echo or (lambda line: None if quiet else _echo(line))
    said: list[str] = []

    def say(line: str) -> None:
        said.append(f"{datetime.now().strftime('%H:%M:%S.%f')[:-3]} INFO {line}")
        shown(line)

    ray = import_ray()
    setup_start = time.monotonic()
    if not ray.is_initialized():  # (``veeksha run`` connects before it makes the run folder)
        _connect(ray, settings.address)
    shards: list[ShardState] = []
    placement = None
    with _Interrupts() as interrupts:
        try:
            count = settings.shards or len([n for n in ray.nodes() if n.get("Alive")])
            placement = _place(ray, count)
            shards = _start_actors(ray, placement, count, run_dir, settings.chunk_bytes)
            say(f"ray: {count} shard(s) on node(s) " + ", ".join(s.node_id[:12] for s in shards))
            _wait_for_servers(scenario, say)
            cache_reset = _reset_prefix_caches(scenario, say)
            t0_wall_ns = _agree_t0(ray, shards, scenario, settings, interrupts)
            setup_s = time.monotonic() - setup_start
            _follow(
                ray,
                shards,
                settings.pull_interval_s,
                interrupts,
                say,
                silence_s=settings.engine_silence_s,
            )
            interrupted = interrupts.count > 0
            _finish(ray, shards)
        finally:
            _release(ray, shards, placement, local=settings.address == "local")
    return merge_and_evaluate(
        scenario,
        run_dir,
        shards,
        t0_wall_ns,
        interrupted,
        setup_s,
        quiet=quiet,
        plots=plots,
        cache_reset=cache_reset,
        driver_lines=said,
    )


def _wait_for_servers(scenario: Any, say: Callable[[str], None]) -> None:
    """Each client's server that is starting waited for once, by the driver, before the shards
    agree on t0 (``client.ready_timeout``): the shards then find it answering at once."""
    from veeksha.dispatch.settings import resolve_api_key
    from veeksha.engine.target import (
        client_api_base,
        resolved_headers,
        trial_request,
        wait_until_ready,
    )

    entries = scenario.client_entries()
    for (name, client), headers in zip(entries, resolved_headers(scenario), strict=True):
        api_base = client_api_base(client)  # (client.api_base, else OPENAI_API_BASE)
        if api_base is not None and client.ready_timeout > 0 and client.model:
            key = "client.ready_timeout" if not scenario.clients else f"{name}.ready_timeout"
            api_key = resolve_api_key(client)
            trial = trial_request(client, client.model)
            wait = client.ready_timeout
            wait_until_ready(api_base, api_key, wait, key, headers, say, trial)


def _reset_prefix_caches(scenario: Any, say: Callable[[str], None]) -> dict[str, Any] | None:
    """The servers' prefix caches emptied once, by the driver, before the shards start
    (``prefix_cache_reset``; the shards' scenarios have it off); what was done, or None. A
    client without ``api_base`` has a simulator of its own on each shard, new and empty."""
    if not scenario.prefix_cache_reset.enabled:
        return None
    from veeksha.dispatch.settings import resolve_api_key
    from veeksha.engine.target import resolved_headers
    from veeksha.server.cache_reset import reset_prefix_caches

    targets = [
        (client.api_base, resolve_api_key(client), headers)
        for (_, client), headers in zip(
            scenario.client_entries(), resolved_headers(scenario), strict=True
        )
        if client.api_base is not None
    ]
    if not targets:
        return None
    account = reset_prefix_caches(scenario.prefix_cache_reset, targets)
    say("prefix cache emptied: " + ", ".join(s["server"] for s in account["servers"]))
    return account


def _agree_t0(
    ray: ModuleType,
    shards: Sequence[ShardState],
    scenario: Any,
    settings: DistributedSettings,
    interrupts: _Interrupts,
) -> int:
    """Start every shard's engine, wait until all are set up (the barrier), measure the
    offsets, and send each shard t0 on its own clock; returns t0 on the driver's clock."""
    shard_scenario = _shard_scenario(scenario, settings.workers_per_shard)
    count = len(shards)
    for shard in shards:
        shard.spec = _shard_spec(shard.index, count)
    ray.get(
        [shard.actor.start.remote(shard_scenario, shard.spec) for shard in shards],
        timeout=_CALL_TIMEOUT_S,
    )
    ready = ray.get([shard.actor.set_up.remote() for shard in shards], timeout=_SETUP_TIMEOUT_S)
    for shard, ok in zip(shards, ready, strict=True):
        if not ok:
            outcome = ray.get(shard.actor.finish.remote(5.0), timeout=_CALL_TIMEOUT_S).outcome
            why = (outcome or {}).get("error") or "its engine ended during set-up"
            raise ConfigurationError(f"shard {shard.index} could not start: {why}")
    if interrupts.count:
        raise RunAbortedError("interrupted before the shards started; nothing was run")
    for shard in shards:
        shard.offset_before = _measure_offset(ray, shard.actor)
    t0_wall_ns = time.time_ns() + round(settings.start_margin_s * _NS)
    ray.get(
        [
            shard.actor.release.remote(_on_shard_clock(shard.offset_before, t0_wall_ns))
            for shard in shards
        ],
        timeout=_CALL_TIMEOUT_S,
    )
    return t0_wall_ns


def _echo(line: str) -> None:
    sys.stderr.write(f"{line}\n")


# -------------------------------------------------------------------------------- cluster


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (``local``: start one of this process' own); a
    ``ConfigurationError`` naming the fix when there is none. ``run_distributed`` then uses it."""
    _connect(import_ray(), address)


def _connect(ray: ModuleType, address: str) -> None:
    options: dict[str, Any] = {
        "log_to_driver": False,
        "logging_level": "ERROR",
        "configure_logging": True,
    }
    if address == "local":  # a cluster of this process' own, stopped by ray.shutdown()
        options |= {
            "address": "local",
            "_node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "object_store_memory": 200 * 1024 * 1024,
        }
    else:
        options["address"] = address
        _check_reachable(address)
    try:
        with _group_stops_blocked(address == "local"):
            ray.init(**options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigurationError(
            f"cannot connect to the Ray cluster at {address!r}: {exc}; start one with {_START_HINT}"
        ) from None


@contextlib.contextmanager
def _group_stops_blocked(local: bool) -> Iterator[None]:
    """A local cluster's processes (its GCS, raylet, agents) are children of this process and
    in its process group: a terminal that closes sends SIGHUP to the group, and `timeout` or
    `kill -- -PGID` SIGTERM, and they died of it (this process then waited 60 s for a GCS that
    was gone, and exited 1 without results). They start with both blocked (a child inherits its
    parent's signal mask; Ray blocks SIGINT in them the same way), so this process stops the
    run as on Ctrl-C and shuts the cluster down (``_shutdown_at_once``: the SIGTERM of Ray's
    shutdown would wait for nothing). (A shard's actor and engine are in a process group of
    their own: not signalled.)"""
    if not local or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, _GROUP_STOPS)
    try:
        yield
    finally:  # (a stop that came meanwhile is delivered now: this process stops the run)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


#: what a terminal or `timeout` sends the whole process group (SIGINT: Ray blocks it itself)
_GROUP_STOPS = frozenset({signal.SIGHUP, signal.SIGTERM})


_START_HINT = "`ray start --head` (docs/distributed.md) or use --ray local"
#: how long a cluster's address may take to accept a connection
_REACH_TIMEOUT_S = 5.0


def _check_reachable(address: str) -> None:
    """An explicit ``HOST:PORT`` must accept a TCP connection: ``ray.init`` retries an address
    where nothing listens for ever (on Ray 2.x, every 5 s), which would hang the run."""
    if address == "auto" or "://" in address:
        return  # (auto: Ray's own address file, refused at once when absent; ray://: a client)
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigurationError(
            f"Ray address {address!r}: expected HOST:PORT of a Ray cluster's head (e.g. "
            f"127.0.0.1:6379), auto or local"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise ConfigurationError(
            f"cannot connect to the Ray cluster at {address!r}: {exc.strerror or exc} (within"
            f" {_REACH_TIMEOUT_S:g} s); start one with {_START_HINT}"
        ) from None


def _place(ray: ModuleType, count: int) -> Any:
    from ray.util.placement_group import placement_group

    if count < 1:
        raise ConfigurationError("the Ray cluster has no alive node to run a shard on")
    group = placement_group([{"CPU": 1}] * count, strategy="SPREAD")
    try:
        ray.get(group.ready(), timeout=_PLACE_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        with contextlib.suppress(Exception):
            ray.util.remove_placement_group(group)
        raise ConfigurationError(
            f"the Ray cluster cannot place {count} shard(s) (one CPU each) within "
            f"{_PLACE_TIMEOUT_S:g} s; lower runtime.distributed.shards or add nodes"
        ) from None
    return group


def _start_actors(
    ray: ModuleType, placement: Any, count: int, run_dir: Path, chunk_bytes: int
) -> list[ShardState]:
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    actor_class = ray.remote(ShardActor)
    token = secrets.token_hex(4)  # (a name of this run's own on a cluster shared with others)
    shards = []
    for index in range(count):
        actor = actor_class.options(
            num_cpus=1,
            max_restarts=0,
            max_task_retries=0,
            name=actor_name(run_dir.name, index, token),
            namespace=NAMESPACE,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=placement, placement_group_bundle_index=index
            ),
        ).remote(run_dir.name, chunk_bytes)
        copy = LocalCopy(run_dir / SHARDS_DIR / f"shard-{index}")
        shards.append(ShardState(index, actor, copy))
    node_ids = ray.get([shard.actor.node_id.remote() for shard in shards], timeout=120)
    for shard, node_id in zip(shards, node_ids, strict=True):
        shard.node_id = node_id
    # each engine process has imported the engine: its start-up is not in the start margin
    ready = ray.get([shard.actor.ready.remote() for shard in shards], timeout=_READY_TIMEOUT_S)
    failed = [shard.index for shard, ok in zip(shards, ready, strict=True) if not ok]
    if failed:
        raise ConfigurationError(
            f"the engine process of shard(s) {failed} did not start; is veeksha installed on "
            "every node of the cluster (pip install 'veeksha[ray]')?"
        )
    return shards


def _release(
    ray: ModuleType, shards: Sequence[ShardState], placement: Any, local: bool = False
) -> None:
    """Delete the shards' folders, end the actors, free the placement, disconnect (and stop
    a ``local`` cluster: ``_shutdown_at_once``). Best effort: a lost shard's actor is gone
    already."""
    cleanups = []
    for shard in shards:
        if shard.lost is None or shard.engine_died or shard.engine_silent:  # (actor answers)
            with contextlib.suppress(Exception):
                cleanups.append(shard.actor.cleanup.remote())
    with contextlib.suppress(Exception):
        ray.get(cleanups, timeout=_CALL_TIMEOUT_S)
    for shard in shards:
        with contextlib.suppress(Exception):
            ray.kill(shard.actor)
    if placement is not None:
        with contextlib.suppress(Exception):
            ray.util.remove_placement_group(placement)
    if local:
        _shutdown_at_once(ray)
    else:
        ray.shutdown()


def _shutdown_at_once(ray: ModuleType) -> None:
    """``ray.shutdown()`` of a ``local`` cluster without its grace. Ray sends each of the
    cluster's processes SIGTERM and gives it 1 s before SIGKILL, one after the other; these
    started with SIGTERM blocked (``_group_stops_blocked``), so the grace was ~3 s of waiting
    for a signal they never take, at the end of every ``--ray local`` run. They get SIGKILL at
    once, and so do the raylet's own children (its agents and workers: those that outlive it
    ask the GCS why it died, and with the GCS gone too they stayed). Through Ray's node object,
    which is not Ray's public interface: without it, the plain ``ray.shutdown()``."""
    import psutil

    try:
        from ray._private import worker as ray_worker

        node: Any = ray_worker._global_node  # (None when Ray started no node: AttributeError)
        kill_all = node.kill_all_processes
        pids = [info.process.pid for infos in node.all_processes.values() for info in infos]
    except (ImportError, AttributeError):
        ray.shutdown()
        return
    tree: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            tree += psutil.Process(pid).children(recursive=True)

    def at_once(*args: Any, **options: Any) -> Any:
        for process in tree:
            with contextlib.suppress(psutil.Error):
                process.kill()
        result = kill_all(*args, **(options | {"allow_graceful": False}))
        psutil.wait_procs(tree, timeout=5.0)
        return result

    node.kill_all_processes = at_once
    ray.shutdown()


# ---------------------------------------------------------------------------------- clock


def _measure_offset(ray: ModuleType, actor: Any) -> Any:
    """The shard's clock offset from ``_PROBES`` round trips (min-RTT estimate)."""
    from veeksha.distributed.clock import estimate_offset

    ray.get(actor.clock_ns.remote(), timeout=_CALL_TIMEOUT_S)  # (a first call warms the path)
    samples = []
    for _ in range(_PROBES):
        send = time.time_ns()
        shard_ns = ray.get(actor.clock_ns.remote(), timeout=_CALL_TIMEOUT_S)
        samples.append((send, int(shard_ns), time.time_ns()))
    return estimate_offset(samples)


def _on_shard_clock(estimate: Any, driver_ns: int) -> int:
    """``driver_ns`` on the shard's clock."""
    from veeksha.distributed.clock import to_shard_ns

    return to_shard_ns(driver_ns, estimate)


def _shard_spec(index: int, count: int) -> Any:
    from veeksha.distributed.partition import ShardSpec

    return ShardSpec(index=index, count=count)


def _shard_scenario(scenario: Any, workers_per_shard: int | None) -> Any:
    """What a shard runs: its workers, and no prefix cache reset (the driver's, once)."""
    update: dict[str, Any] = {}
    if workers_per_shard is not None:
        update["runtime"] = scenario.runtime.model_copy(update={"num_workers": workers_per_shard})
    if scenario.prefix_cache_reset.enabled:
        reset = scenario.prefix_cache_reset.model_copy(update={"enabled": False})
        update["prefix_cache_reset"] = reset
    return scenario.model_copy(update=update) if update else scenario


# ------------------------------------------------------------------------------- the run


def _follow(
    ray: ModuleType,
    shards: Sequence[ShardState],
    interval_s: float,
    interrupts: _Interrupts,
    say: Callable[[str], None],
    *,
    silence_s: float = ENGINE_SILENCE_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Pull every shard each ``interval_s`` (all at once, answers taken as they come:
    ``pulls.PullRounds``) until each has ended or is lost; relay Ctrl-C. A shard whose engine
    process has been silent ``silence_s`` (frozen while its actor answers) is lost."""

    def wait(refs: list[Any], timeout_s: float) -> Any:
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout_s)
        return ready[0] if ready else None

    rounds: PullRounds[int, Any] = PullRounds(
        lambda index: shards[index].actor.pull.remote(), wait, clock
    )
    stops_sent = 0
    last_status = clock()
    while any(shard.running and shard.lost is None for shard in shards):
        if interrupts.count > stops_sent:
            stops_sent = interrupts.count
            say(f"interrupted: stopping {len(shards)} shard(s)")
            for shard in shards:
                if shard.lost is None and shard.running:
                    with contextlib.suppress(Exception):
                        shard.actor.stop.remote()
        next_pull = clock() + interval_s
        live = [shard.index for shard in shards if shard.lost is None and shard.running]
        for index, ref in rounds.round(live, next_pull):
            _receive(ray, shards[index], ref, silence_s)
        for index in rounds.in_flight():
            _missed(shards[index], "no answer to pulls")
            if shards[index].lost is not None:
                rounds.forget(index)
        if clock() - last_status >= 5.0:
            last_status = clock()
            say(
                "shards: "
                + ", ".join(
                    f"{s.index}: {'lost' if s.lost else 'running' if s.running else 'ended'}"
                    f" ({s.copy.pulls} pulls)"
                    for s in shards
                )
            )
        sleep(max(0.0, next_pull - clock()))


def _receive(ray: ModuleType, shard: ShardState, ref: Any, silence_s: float) -> None:
    """Apply a pull that has answered (its reference is ready); lose the shard if its running
    engine has been silent ``silence_s``."""
    try:
        pull = ray.get(ref, timeout=_CALL_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        _missed(shard, "no answer to pulls")
        return
    except ray.exceptions.ActorUnavailableError as exc:  # (transient: a network blip)
        _missed(shard, str(exc).splitlines()[0] if str(exc) else "actor unavailable")
        return
    except ray.exceptions.RayError as exc:  # the actor or its node died
        _mark_lost(shard, _loss_reason(exc))
        return
    shard.missed = 0
    shard.copy.apply(pull)
    if shard.running and not pull.running:
        shard.ended_at_wall_ns = time.time_ns()
    shard.running = pull.running
    if pull.running and pull.silent_s is not None and pull.silent_s >= silence_s:
        # stopped (SIGSTOP, a frozen cgroup) or stuck: its actor ends it at the release
        shard.engine_silent = True
        _mark_lost(
            shard,
            f"its engine process showed no sign of life for {pull.silent_s:.0f} s (stopped or"
            " stuck) and was ended",
            time.time_ns() - int(pull.silent_s * _NS),
        )


def _missed(shard: ShardState, reason: str) -> None:
    shard.missed += 1
    if shard.missed >= MISSED_PULLS:
        _mark_lost(shard, f"{reason} for {shard.missed} pulls in a row")


def _mark_lost(shard: ShardState, reason: str, at_wall_ns: int | None = None) -> None:
    shard.lost = reason
    shard.lost_at_wall_ns = time.time_ns() if at_wall_ns is None else at_wall_ns


def _loss_reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else 'the shard actor died'}"


def _finish(ray: ModuleType, shards: Sequence[ShardState]) -> None:
    """Pull the rest of every shard not lost (the finished run's files), then the offsets."""
    refs = [
        (shard, shard.actor.finish.remote(_FINISH_TIMEOUT_S))
        for shard in shards
        if shard.lost is None
    ]
    for shard, ref in refs:
        actor = shard.actor

        def fetch(name: str, offset: int, length: int, actor: Any = actor) -> bytes:
            return bytes(
                ray.get(actor.read_chunk.remote(name, offset, length), timeout=_CALL_TIMEOUT_S)
            )

        try:
            pull = ray.get(ref, timeout=_FINISH_TIMEOUT_S + _CALL_TIMEOUT_S)
            shard.copy.apply(pull, fetch)  # (its large files piece by piece)
        except (ray.exceptions.RayError, OSError) as exc:
            _mark_lost(shard, _loss_reason(exc))
            continue
        shard.final = pull
        shard.running = False
        died = engine_died(pull.outcome)
        if died is not None:  # (its actor answers, but its engine's run never ended)
            shard.engine_died = True
            _mark_lost(shard, died, shard.ended_at_wall_ns)
    for shard in shards:
        if shard.lost is None:
            try:
                shard.offset_after = _measure_offset(ray, shard.actor)
            except ray.exceptions.RayError as exc:
                _mark_lost(shard, _loss_reason(exc))
