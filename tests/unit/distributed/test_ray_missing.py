"""Without Ray installed, a distributed run is a one-line exit 2 naming the extra to install."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from veeksha.cli import main
from veeksha.distributed.ray_api import MISSING_RAY, import_ray
from veeksha.errors import ConfigurationError


def test_missing_ray_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # (import ray then raises ImportError)
    with pytest.raises(ConfigurationError, match=r"pip install 'veeksha\[ray\]'"):
        import_ray()


def test_run_with_ray_but_without_ray_exits_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("runtime: {max_sessions: 1}\n")
    result = CliRunner().invoke(
        main, ["run", str(scenario), "--ray", "--output-dir", str(tmp_path / "out")]
    )
    assert result.exit_code == 2, result.output
    assert MISSING_RAY in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # nothing half-made
