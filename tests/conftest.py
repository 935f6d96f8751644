"""Fixtures of every test.

Every test's calibrated server tokenizers are cached in the session's own folder, never in the
user's ~/.cache (tests that check the cache point it elsewhere themselves).

Every test starts on all the CPUs the session had: a run made in this process
(``run_scenario``, ``run_point``, a sweep) pins its main process (here, pytest) to one CPU, as
``veeksha run`` does its own; left pinned, every later test and every process it starts (its
``veeksha run``, simulators, hostile servers, workers) would share that one CPU.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Generator, Iterator

import pytest

from veeksha.generate.calibration import CACHE_ENV


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, object, object]:
    """The collector off while the test modules are imported, then what they made frozen.

    Each of the suite's processes imports (and rewrites the asserts of) every test module:
    ~300 MB of objects that live as long as the process. The collections those allocations set
    off scanned that growing heap again and again (14 s of each process' collection, 10 s
    without them); and every full collection during the tests scanned it all again (the unit
    tests in one process: 66 CPU-s, 55 with it frozen). Its garbage is collected once, then it
    is moved out of the collector's sight (``gc.freeze``), as a run does with its set-up's
    objects (``veeksha.engine.run``); what the tests make is collected as before."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()
        if collecting:
            gc.enable()


@pytest.fixture(autouse=True, scope="session")
def _tokenizer_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("veeksha-cache"))
    yield
    if previous is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = previous


_SESSION_CPUS = os.sched_getaffinity(0)


@pytest.fixture(autouse=True)
def _all_cpus() -> Iterator[None]:
    """Give this process back the session's CPUs before and after each test."""
    if os.sched_getaffinity(0) != _SESSION_CPUS:
        os.sched_setaffinity(0, _SESSION_CPUS)
    yield
    if os.sched_getaffinity(0) != _SESSION_CPUS:
        os.sched_setaffinity(0, _SESSION_CPUS)
