"""run.log masks every client's API key, not only the first."""

from __future__ import annotations

from pathlib import Path

from veeksha.engine.runlog import RunLog


def test_every_key_is_masked(tmp_path: Path) -> None:
    first, second = "sk-first-0123456789", "sk-second-abcdefghij"
    log = RunLog(tmp_path, [first, None, second, "sk-first-0123456789xyz"])
    log.info(f"client a echoed {first}; client b echoed {second}")
    log.warning(f"run failed: server said {second[:12]}")  # a key cut short by the server
    log.info("client c echoed sk-first-0123456789xyz whole")
    log.close()
    text = (tmp_path / "run.log").read_text()
    assert first not in text
    assert second[:12] not in text
    assert "xyz" not in text  # the longer key is masked whole, not around its shorter prefix
    assert text.count("***") == 4
