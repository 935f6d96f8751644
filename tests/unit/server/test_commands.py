"""The command lines of the managed-server types, and the `server:` section's validation."""

from __future__ import annotations

import sys

import pytest

from veeksha.errors import ScenarioError
from veeksha.scenario.loader import load_scenario_text
from veeksha.scenario.server import (
    CommandServer,
    LlamaCppServer,
    SglangServer,
    SimulatorServer,
    VllmServer,
)
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.server.commands import server_argv


def test_each_engine_type_builds_its_projects_command_line() -> None:
    where = ["--host", "0.0.0.0", "--port", "9000"]
    vllm = VllmServer(model="Qwen/Qwen2.5-0.5B", args=["--port-hint", "{port}"])
    assert server_argv(vllm, "0.0.0.0", 9000) == [
        "vllm", "serve", "Qwen/Qwen2.5-0.5B", *where, "--port-hint", "9000"
    ]  # fmt: skip
    sglang = SglangServer(model="m", executable="/opt/sg/bin/python")
    assert server_argv(sglang, "0.0.0.0", 9000) == [
        "/opt/sg/bin/python", "-m", "sglang.launch_server", "--model-path", "m", *where,
        "--enable-metrics",
    ]  # fmt: skip
    llama = LlamaCppServer(model="/models/q4.gguf", args=["-c", "4096"])
    assert server_argv(llama, "0.0.0.0", 9000) == [
        "llama-server", "-m", "/models/q4.gguf", *where, "--metrics", "-c", "4096"
    ]  # fmt: skip
    command = CommandServer(command=["serve", "--bind={host}:{port}"])
    assert server_argv(command, "::1", 7) == ["serve", "--bind=::1:7"]


def test_the_simulator_type_runs_veeksha_sim_server_with_the_scenarios_settings() -> None:
    config = SimulatorServer(args=["--processes", "2"])
    argv = server_argv(config, "127.0.0.1", 5, SimulatorConfig())
    assert argv[:3] == [sys.executable, "-m", "veeksha.simulator"]
    assert argv[-2:] == ["--processes", "2"]
    settings = argv[argv.index("--config-json") + 1]
    assert SimulatorConfig.model_validate_json(settings).preset == "fast"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "client: {api_base: 'http://x/v1', model: m}\nserver: {type: veeksha_sim}",
            "client.api_base: server is set too",
        ),
        ("server: {type: command, command: [x]}", "needs server.model or client.model"),
        ("server: {type: vllm, model: m, stop_signal: SIGFOO}", "not a signal name"),
        ("server: {type: vllm, model: m, ready_path: health}", "must start with /"),
        ("server: {type: command, command: []}", "must not be empty"),
    ],
)
def test_bad_server_sections_are_refused_in_the_users_words(text: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load_scenario_text(text, "s.yaml")


def test_stop_signal_takes_short_names() -> None:
    assert VllmServer(model="m", stop_signal="int").stop_signal == "SIGINT"
