"""The command line of each managed-server type (docs/server.md lists them).

>>> from veeksha.scenario.server import VllmServer
>>> server_argv(VllmServer(model="m", args=["--max-num-seqs", "8"]), "127.0.0.1", 8000)
['vllm', 'serve', 'm', '--host', '127.0.0.1', '--port', '8000', '--max-num-seqs', '8']
"""

from __future__ import annotations

import sys

from veeksha.scenario.server import (
    CommandServer,
    LlamaCppServer,
    ManagedServerConfig,
    SglangServer,
    SimulatorServer,
    VllmServer,
)
from veeksha.scenario.simulator import SimulatorConfig

__all__ = ["server_argv"]


def server_argv(
    config: ManagedServerConfig,
    host: str,
    port: int,
    simulator: SimulatorConfig | None = None,
) -> list[str]:
    """The argv that starts ``config`` listening on ``host:port``. ``simulator``: the settings a
    ``veeksha_sim`` server runs with (the scenario's ``simulator:`` section)."""
    if isinstance(config, CommandServer):
        return [_fill(arg, host, port) for arg in config.command]
    if isinstance(config, SimulatorServer):
        settings = simulator or SimulatorConfig()
        return [
            sys.executable,
            "-m",
            "veeksha.simulator",  # = `veeksha sim-server`, without depending on PATH
            "--host",
            host,
            "--port",
            str(port),
            "--config-json",
            settings.model_dump_json(),
            *(_fill(arg, host, port) for arg in config.args),
        ]
    extra = [_fill(arg, host, port) for arg in config.args]
    where = ["--host", host, "--port", str(port)]
    if isinstance(config, VllmServer):
        return [config.executable or "vllm", "serve", config.model, *where, *extra]
    if isinstance(config, SglangServer):
        launch = [config.executable or "python3", "-m", "sglang.launch_server"]
        return [*launch, "--model-path", config.model, *where, "--enable-metrics", *extra]
    assert isinstance(config, LlamaCppServer)
    return [config.executable or "llama-server", "-m", config.model, *where, "--metrics", *extra]


def _fill(arg: str, host: str, port: int) -> str:
    return arg.replace("{host}", host).replace("{port}", str(port))
