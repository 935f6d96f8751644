"""A Ray address where no cluster listens is a one-line exit 2 at once, before any folder: Ray's
own ``ray.init`` retries such an address for ever."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from veeksha.cli import main
from veeksha.distributed.driver import _check_reachable
from veeksha.errors import ConfigurationError


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # (closed again when the block ends)


def test_an_address_where_nothing_listens_is_refused_at_once() -> None:
    port = _closed_port()
    with pytest.raises(ConfigurationError, match=r"Connection refused.*ray start --head"):
        _check_reachable(f"127.0.0.1:{port}")
    with pytest.raises(ConfigurationError, match="expected HOST:PORT"):
        _check_reachable("nonsense")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        _check_reachable(f"127.0.0.1:{listening.getsockname()[1]}")  # accepted: no error
    _check_reachable("auto")  # (Ray's own address file)
    _check_reachable("ray://127.0.0.1:10001")  # (a Ray client address: Ray's to check)


def test_run_against_an_address_without_a_cluster_exits_2_and_makes_no_folder(
    tmp_path: Path,
) -> None:
    pytest.importorskip("ray")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("runtime: {max_sessions: 1}\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        ["run", str(scenario), "--ray", f"127.0.0.1:{_closed_port()}", "--output-dir", str(out)],
    )
    assert result.exit_code == 2, result.output
    assert "cannot connect to the Ray cluster" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()  # nothing half-made
