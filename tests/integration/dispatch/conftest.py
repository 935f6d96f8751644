"""Fixtures of the dispatch integration tests: a result collector and a pool + stub server."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator

import psutil
import pytest
import uvloop

from tests.integration.dispatch.stub_server import StubServer
from veeksha.dispatch.launch import WorkerLaunch
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.dispatch.pool import WorkerPool
from veeksha.dispatch.settings import WorkerSettings

_ids = itertools.count(1)


def item(text: str, max_tokens: int = 4) -> WorkItem:
    """A one-message work item with a fresh request id, dispatched now."""
    return WorkItem(next(_ids), [("user", text)], max_tokens, time.monotonic_ns())


class Collector:
    """``on_results`` for tests: stores Results by id, fails on a duplicate."""

    def __init__(self) -> None:
        self.results: dict[int, Result] = {}
        self.batches = 0
        self._changed = asyncio.Event()

    def __call__(self, batch: list[Result]) -> None:
        self.batches += 1
        for result in batch:
            assert result.request_id not in self.results, f"two Results for {result.request_id}"
            self.results[result.request_id] = result
        self._changed.set()

    async def wait_for(self, ids: list[int], limit_s: float = 10.0) -> list[Result]:
        async with asyncio.timeout(limit_s):
            while not all(i in self.results for i in ids):
                self._changed.clear()
                await self._changed.wait()
        return [self.results[i] for i in ids]


def worker_children() -> list[psutil.Process]:
    """Live worker processes that are children of this process."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name() == "veeksha-worker" or "veeksha.dispatch.worker" in " ".join(
                child.cmdline()
            ):
                out.append(child)
        except psutil.NoSuchProcess:
            continue
    return out


def assert_no_orphans(pids: list[int], *, any_worker: bool = False) -> None:
    """The given worker pids are gone (and, with ``any_worker``, every worker child is)."""
    if any_worker:
        assert worker_children() == []
    for pid in pids:
        assert not psutil.pid_exists(pid), f"worker pid {pid} still exists"


class Harness:
    """A loop, a stub server and (optionally) a started pool, for a group of tests."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
        self.server = StubServer()
        self.api_base = self.runner.run(self.server.start())
        self.collector = Collector()
        self.pool: WorkerPool | None = None

    def start_pool(
        self, num_workers: int = 1, launched: WorkerLaunch | None = None, **settings: object
    ) -> WorkerPool:
        options: dict[str, object] = {
            "endpoint": self.api_base + "/chat/completions",
            "model": "stub",
            "request_timeout_s": 5.0,
        }
        options.update(settings)
        pool = WorkerPool(
            WorkerSettings(**options),  # type: ignore[arg-type]
            num_workers,
            [[] for _ in range(num_workers)],
            self.collector,
            launched=launched,
        )
        self.runner.run(pool.start(timeout=30))
        self.pool = pool
        return pool

    def close(self, any_worker: bool = False) -> None:
        pids: list[int] = []
        if self.pool is not None:
            pids = list(self.pool.worker_pids.values())
            self.runner.run(self.pool.stop())
        self.runner.run(self.server.stop())
        self.runner.close()
        assert_no_orphans(pids, any_worker=any_worker)


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness()
    try:
        yield h
    finally:
        h.close()


@pytest.fixture(scope="module")
def chat_pool() -> Iterator[Harness]:
    """Two streaming chat workers with an API key, retries and a 1 s timeout, module-wide."""
    h = Harness()
    try:
        h.start_pool(2, api_key="sk-test-key", max_retries=2, request_timeout_s=1.0)
        yield h
    finally:
        h.close(any_worker=True)
