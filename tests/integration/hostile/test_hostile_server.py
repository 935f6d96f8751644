"""The hostile server itself: a correct behaviour gives a clean run, and what it logs is what
veeksha sent (so tests built on it can trust both)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.hostile.harness import HostileServer, hostile_run, hostile_scenario


def test_a_correct_behaviour_gives_a_clean_run(tmp_path: Path) -> None:
    with HostileServer("tests.integration.hostile.behaviours_basic:correct", tmp_path) as server:
        run = hostile_run(tmp_path, hostile_scenario(server.base_url, sessions=2))
        received = server.received()
    assert run.audit is not None
    assert run.audit.kinds() == {("ok", ""): 6}
    assert [r["method"] for r in received] == ["GET"] + ["POST"] * 6
    assert all(r["output_tokens"] == 6 for r in run.rows)
    # turns 2 and 3 of each chat re-send the answers before them
    assert run.history_answers() == ["t0 t1 t2 t3 t4 t5 "] * 6


def test_a_non_http_answer_is_an_error_row_not_a_crash(tmp_path: Path) -> None:
    behaviour = "tests.integration.hostile.behaviours_basic:not_http_after_first"
    with HostileServer(behaviour, tmp_path) as server:
        run = hostile_run(tmp_path, hostile_scenario(server.base_url, sessions=1))
    assert run.audit is not None
    kinds = run.audit.kinds()
    assert kinds[("ok", "")] == 1
    assert sum(n for (status, _), n in kinds.items() if status == "error") == 1
