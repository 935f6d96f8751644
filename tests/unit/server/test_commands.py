"""The command lines of the managed-server types, and the `server:` section's validation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

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
from veeksha.server.managed import SERVER_LOG, ManagedServer, server_identity


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


def test_a_command_server_takes_the_model_of_each_client_it_serves() -> None:
    # with clients: the check read the unset client: section and refused every command server
    # without server.model, telling to set client.model, which clients: cannot have
    clients = (
        "clients:\n  - {name: a, model: m-a}\n  - {name: b, api_base: 'http://x/v1', model: x}\n"
    )
    server = "server: {type: command, command: [x]}\n"
    load_scenario_text(clients + server, "s.yaml")
    with pytest.raises(ScenarioError) as caught:
        load_scenario_text(clients + "  - {name: c}\n" + server, "s.yaml")
    (issue,) = caught.value.issues
    assert (issue.line, issue.path) == (4, "clients[2].model")
    assert "client 'c' goes to the managed server" in issue.message
    assert "set this client's model, or server.model" in issue.message


def test_a_server_no_client_goes_to_is_refused_at_its_line() -> None:
    # (one client: its api_base is refused beside server:; several went unchecked, and the
    # server was started for nothing)
    text = (
        "clients:\n  - {name: a, api_base: 'http://x/v1', model: m}\nserver: {type: veeksha_sim}\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_scenario_text(text, "s.yaml")
    (issue,) = caught.value.issues
    assert (issue.line, issue.path) == (3, "server")
    assert "no request would go to the managed server" in issue.message


def test_a_managed_simulator_serves_every_model_its_clients_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # it served simulator.model alone, and every client's request was answered 404
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    text = (
        "clients:\n"
        "  - {name: a, model: m-a, max_model_len: 900}\n"
        "  - {name: b, model: m-b}\n"
        "  - {name: c, model: m-c, api_base: 'http://x/v1'}\n"
        "server: {type: veeksha_sim}\n"
    )
    scenario = load_scenario_text(text, "s.yaml")
    served = json.loads(server_identity(scenario) or "")["simulator"]
    assert served["model"] == "m-a"
    assert served["max_model_len"] == 900
    assert set(served["models"]) == {"m-b"}  # (m-c has its own endpoint)
    assert ManagedServer.for_scenario(scenario, tmp_path / SERVER_LOG).model == "veeksha-sim"


def test_a_managed_servers_log_masks_every_clients_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KEY_B", "sk-bbbbbbbbbbbb")
    text = (
        "clients:\n"
        "  - {name: a, model: m, api_key: sk-aaaaaaaaaaaa}\n"
        "  - {name: b, model: m, api_key_env: KEY_B}\n"
        "server: {type: veeksha_sim}\n"
    )
    managed = ManagedServer.for_scenario(load_scenario_text(text, "s.yaml"), tmp_path / "log")
    managed.argv = ["serve", "--api-key", "sk-aaaaaaaaaaaa", "--other", "sk-bbbbbbbbbbbb"]
    assert managed.describe()["argv"] == ["serve", "--api-key", "***", "--other", "***"]


def test_stop_signal_takes_short_names() -> None:
    assert VllmServer(model="m", stop_signal="int").stop_signal == "SIGINT"


def test_a_managed_vllm_server_serves_the_cache_reset_when_the_run_empties_its_cache(
    tmp_path: Path,
) -> None:
    def env(server: str, reset: bool) -> dict[str, str]:
        text = f"server: {server}\nprefix_cache_reset: {{enabled: {str(reset).lower()}}}\n"
        return ManagedServer.for_scenario(load_scenario_text(text, "s.yaml"), tmp_path).config.env

    # vLLM answers POST /reset_prefix_cache only in its dev mode
    assert env("{type: vllm, model: m}", True) == {"VLLM_SERVER_DEV_MODE": "1"}
    assert env("{type: vllm, model: m}", False) == {}
    kept = "{type: vllm, model: m, env: {VLLM_SERVER_DEV_MODE: '0', A: b}}"
    assert env(kept, True) == {"VLLM_SERVER_DEV_MODE": "0", "A": "b"}
    assert env("{type: sglang, model: m}", True) == {}
