"""A managed server's `server:` keys that cannot work are refused before anything starts, each
named where the scenario file has it (file:line:column, key, fix), as a validation error is."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from veeksha.errors import ConfigurationError, TargetError
from veeksha.scenario.loader import load_scenario_text
from veeksha.server.managed import SERVER_LOG, ManagedServer

HEAD = """\
seed: 1
session_generator:
  type: synthetic
  session_graph: {type: single_request}
server:
"""  # (the server's keys start on line 6)


def _start(tmp_path: Path, server: str, overrides: tuple[str, ...] = ()) -> ManagedServer:
    scenario = load_scenario_text(HEAD + server, "s.yaml", overrides)
    managed = ManagedServer.for_scenario(scenario, tmp_path / SERVER_LOG)
    managed.start()
    return managed


def _refused(tmp_path: Path, server: str, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(ConfigurationError) as caught:
        _start(tmp_path, server, overrides)
    assert not (tmp_path / SERVER_LOG).exists()  # (nothing was started)
    return str(caught.value)


def test_a_program_not_found_is_named_at_its_list_item(tmp_path: Path) -> None:
    # was: `server: the program ... fix server.command[0]`, no file or line
    server = "  type: command\n  model: m\n  command: [no-such-server-xyz, '{port}']\n"
    assert _refused(tmp_path, server) == (
        "s.yaml:8:13: server.command[0]: the program 'no-such-server-xyz' was not found (PATH "
        "or the path given): install it or fix server.command[0]"
    )


def test_an_engines_program_not_found_is_named_at_executable_or_its_section(
    tmp_path: Path,
) -> None:
    given = "  type: vllm\n  model: m\n  executable: /opt/nowhere/vllm\n"
    assert _refused(tmp_path, given).startswith(
        "s.yaml:8:3: server.executable: the program '/opt/nowhere/vllm' was not found"
    )
    # no executable: key: the section's line, the key to add named
    default = "  type: sglang\n  model: m\n  env: {PATH: /nonexistent}\n"
    assert _refused(tmp_path, default) == (
        "s.yaml:5:1: server.executable: the program 'python3' was not found (PATH or the path "
        "given): install it or set server.executable (the program to run instead)"
    )


def test_a_port_another_process_holds_is_named_at_the_key_or_its_override(
    tmp_path: Path,
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        fix = "stop it, or choose another server.port (0 picks a free one)"
        server = f"  type: command\n  model: m\n  command: [sleep, '9']\n  port: {port}\n"
        assert _refused(tmp_path, server) == (
            f"s.yaml:9:3: server.port: 127.0.0.1:{port} is already in use by another process "
            f"(another server?): {fix}"
        )
        given = (f"server.port={port}",)
        assert _refused(tmp_path, server.replace(str(port), "0"), given) == (
            f"--set server.port={port}: server.port: 127.0.0.1:{port} is already in use by "
            f"another process (another server?): {fix}"
        )


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("10.255.255.1", "is not an address of this machine"),
        ("no-such-host.invalid", "is not a name this machine resolves"),
    ],
)
def test_a_host_not_of_this_machine_is_refused_at_its_key(
    tmp_path: Path, host: str, why: str
) -> None:
    # was: a traceback from binding the port picked for it (OSError, exit 1)
    server = f"  type: command\n  model: m\n  command: [sleep, '9']\n  host: {host}\n"
    message = _refused(tmp_path, server)
    assert message.startswith(f"s.yaml:9:3: server.host: {host!r} {why}"), message
    assert message.endswith(
        ": the server listens on this machine; use 127.0.0.1 (this machine only), 0.0.0.0 "
        "(every interface) or one of its addresses"
    )


def test_a_working_folder_that_is_not_one_is_named_at_its_key(tmp_path: Path) -> None:
    server = "  type: command\n  model: m\n  command: [sleep, '9']\n  cwd: /nonexistent/dir\n"
    assert _refused(tmp_path, server) == (
        "s.yaml:9:3: server.cwd: '/nonexistent/dir' is not a folder: fix server.cwd"
    )


def _fake_engines(tmp_path: Path) -> str:
    """A folder holding a ``llama-server`` and a ``vllm`` that exit at once: a server's PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("llama-server", "vllm"):
        (folder / name).write_text("#!/bin/sh\nexit 1\n")
        (folder / name).chmod(0o755)
    return f"  env: {{PATH: '{folder}'}}\n"


def test_a_model_file_that_does_not_exist_is_refused_before_the_engine_starts(
    tmp_path: Path,
) -> None:
    # the engine would load for a while, then fail in its own words in server.log
    path = _fake_engines(tmp_path)
    llama = f"  type: llama_cpp\n{path}  cwd: {tmp_path}\n  model: q4.gguf\n"
    assert _refused(tmp_path, llama) == (
        f"s.yaml:9:3: server.model: 'q4.gguf': no such GGUF file (a relative path is taken "
        f"from {tmp_path}): fix server.model"
    )
    vllm = f"  type: vllm\n{path}  model: /models/nowhere\n"
    assert _refused(tmp_path, vllm) == (
        "s.yaml:8:3: server.model: '/models/nowhere': no such model folder: fix server.model"
    )


def test_a_model_that_exists_or_is_a_hub_id_is_not_refused(tmp_path: Path) -> None:
    # (the fake engine exits at once: the start fails after the check, not at it)
    fake = tmp_path / "engine"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    (tmp_path / "q4.gguf").write_bytes(b"GGUF")
    for server in (
        f"  type: llama_cpp\n  executable: {fake}\n  cwd: {tmp_path}\n  model: q4.gguf\n",
        f"  type: vllm\n  executable: {fake}\n  model: Qwen/Qwen2.5-0.5B\n",
        # a wrapper of the user's (a container) may have the path where this machine has not
        f"  type: vllm\n  executable: {fake}\n  model: /models/in-the-container\n",
        f"  type: llama_cpp\n  executable: {fake}\n  model: /models/q4.gguf\n",
    ):
        with pytest.raises(TargetError, match="exited with code 1 before it was ready"):
            _start(tmp_path, server + "  ready_timeout: 30\n")


def test_a_scenario_not_read_from_a_file_names_the_key_alone(tmp_path: Path) -> None:
    from veeksha.scenario.models import Scenario
    from veeksha.scenario.server import CommandServer

    scenario = Scenario(server=CommandServer(command=["no-such-server-xyz"], model="m"))
    with pytest.raises(ConfigurationError, match=r"^server.command\[0\]: the program 'no-such"):
        ManagedServer.for_scenario(scenario, tmp_path / SERVER_LOG).start()
