"""The documented timestamp order holds under stress, run after run (issue 20 item 2).

Conditions that once broke it: a worker whose loop is busy (here parsing multi-megabyte
answers) while requests handed over ahead of time are due to it, with two CPU hogs competing
for the machine's cores and many timers (3-turn chats with 10 ms think times). Every run's rows
are audited by the health checks themselves: ``dependencies`` (no child before its parents'
completion plus think time) and ``lifecycle_delays`` (``ready ≤ dispatched ≤ received ≤ sent ≤
first chunk ≤ completed ≤ processed`` on every row) must find no violation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.hostile.harness import HostileServer, hostile_run, hostile_scenario

_RUNS = 3


@pytest.fixture
def cpu_hogs() -> Iterator[None]:
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(2)
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.mark.usefixtures("cpu_hogs")
@pytest.mark.timeout(300)  # 3 runs beside two CPU hogs: ~55 s on a loaded machine
def test_the_timestamp_order_holds_with_a_busy_worker_and_cpu_hogs(tmp_path: Path) -> None:
    behaviour = "tests.integration.hostile.behaviours_order:huge_last_turns"
    for attempt in range(_RUNS):
        folder = tmp_path / f"run{attempt}"
        folder.mkdir()
        with HostileServer(behaviour, folder, mb=4) as server:
            # (a generous timeout: every row must be an answer, also on a machine the hogs and
            # other work keep busy; a 4 MB answer under that load took more than 5 s once)
            scenario = hostile_scenario(
                server.base_url, sessions=8, rate=16, output_tokens=4, request_timeout=30.0
            )
            scenario = scenario.replace("seed: 7", f"seed: {attempt}")
            run = hostile_run(folder, scenario, in_process=True)
        assert run.run_dir is not None
        health = json.loads((run.run_dir / "health.json").read_text())
        checks = {check["name"]: check for check in health["checks"]}
        order = checks["lifecycle_delays"]["statistics"]["order_violations"]
        assert set(order.values()) == {0}, (attempt, order)
        assert checks["lifecycle_delays"]["status"] == "PASS", checks["lifecycle_delays"]
        dependencies = checks["dependencies"]["statistics"]
        assert dependencies["violations"] == 0, (attempt, dependencies)
        assert run.audit is not None
        assert run.audit.kinds()[("ok", "")] == 24
