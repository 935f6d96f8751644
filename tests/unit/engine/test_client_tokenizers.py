"""Each client's tokenizer built at set-up (``RunSetup._tokenizers``): shared by the clients
of one, a server one calibrated against its own client's target, messages at its own key; and
each client's rows counted in its own (``RunRecorder``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.engine.char_tokenizer import CharTokenizer
from tests.unit.record.builders import T0, make_metadata, make_node, make_result, ns
from veeksha.engine import run_setup
from veeksha.engine.loop import InFlight
from veeksha.engine.recorder import RunRecorder
from veeksha.engine.run_setup import RunSetup
from veeksha.engine.target import ClientTarget, Target
from veeksha.errors import ConfigurationError
from veeksha.generate import calibration
from veeksha.generate.spec import SessionSpec
from veeksha.generate.tokenizer import BuiltinTokenizer, ServerTokenizer, make_tokenizer
from veeksha.record.parquet import ResultWriter
from veeksha.record.reader import load_requests
from veeksha.scenario.loader import load_scenario_text
from veeksha.schedule.session_state import SessionState

CLIENTS = """
clients:
  - {name: a, model: m-a}
  - {name: b, model: m-b, tokenizer: {type: builtin}}
  - {name: c, api_base: http://h:1/v1, model: m-c, tokenizer: {type: server}}
  - {name: d, api_base: http://h:1/v1, model: m-c, tokenizer: {type: server}}
"""


class _Calibrated(BuiltinTokenizer):
    chat_template: object = None


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)

    warning = info


def _setup(text: str, dry_run: bool = False) -> tuple[RunSetup, _Log]:
    setup = object.__new__(RunSetup)
    setup.scenario = load_scenario_text(text, "s.yaml")
    setup.dry_run = dry_run
    log = _Log()
    setup.log = log  # type: ignore[assignment]
    return setup, log


def _target(text: str) -> Target:
    scenario = load_scenario_text(text, "s.yaml")
    clients = [
        ClientTarget(name, client.api_base or "http://sim:9/v1", client.model or "sim", None, "x")
        for name, client in scenario.client_entries()
    ]
    return Target(clients[0].api_base, clients[0].model, None, "x", clients=clients)


def test_clients_of_one_tokenizer_share_one_instance_each_server_its_own_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calibrated: list[tuple[str, str | None]] = []

    def calibrate(tokenizer: ServerTokenizer, *args: Any, **kwargs: Any) -> Any:
        calibrated.append((tokenizer.endpoint, tokenizer.model))
        return _Calibrated()  # (stands in for the calibrated one: no server here)

    monkeypatch.setattr(run_setup, "calibrated_tokenizer", calibrate)
    setup, _ = _setup(CLIENTS)
    measured: list[object] = []
    monkeypatch.setattr(setup, "_chat_template", lambda t, say, warn: measured.append(t) or "none")
    a, b, c, d = setup._tokenizers(_target(CLIENTS))
    assert isinstance(a, BuiltinTokenizer)
    assert a is b  # (none is builtin: one instance)
    assert c is d
    assert c is not a
    # calibrated once, against the clients' own server and model; its chat template measured
    # once (its clients are chat clients)
    assert calibrated == [("http://h:1/tokenize", "m-c")]
    assert measured == [c]


def test_a_dry_runs_server_tokenizer_is_said_at_its_clients_key() -> None:
    setup, log = _setup(CLIENTS, dry_run=True)
    tokenizers = setup._tokenizers(_target(CLIENTS))
    assert all(isinstance(t, BuiltinTokenizer) for t in tokenizers)
    assert tokenizers[2] is tokenizers[3]
    assert len(log.lines) == 1
    assert log.lines[0].startswith("clients[2].tokenizer type server: a dry run has no server")


def test_a_calibration_that_fails_names_its_clients_key(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise calibration._too_few("nothing calibrated")

    monkeypatch.setattr(run_setup, "calibrated_tokenizer", fail)
    setup, _ = _setup(CLIENTS)
    with pytest.raises(ConfigurationError) as caught:
        setup._tokenizers(_target(CLIENTS))
    message = str(caught.value)
    assert message.startswith("clients[2].tokenizer type server: cannot calibrate")
    assert "use clients[2].tokenizer type hf" in message
    assert "client.tokenizer" not in message.replace("clients[2].tokenizer", "")


def test_a_server_tokenizer_without_api_base_names_its_key() -> None:
    config = load_scenario_text(CLIENTS, "s.yaml").client_entries()[2][1].tokenizer
    with pytest.raises(ConfigurationError, match=r"^clients\[2\]\.tokenizer type server needs "):
        make_tokenizer(config, None, "m", key="clients[2].tokenizer")
    with pytest.raises(ConfigurationError, match=r"needs clients\[2\]\.api_base \(or clients"):
        make_tokenizer(config, None, "m", key="clients[2].tokenizer")


def test_each_clients_rows_are_counted_in_its_own_tokenizer(tmp_path: Path) -> None:
    nodes = [
        make_node(0, prompt="ba be bi", prompt_tokens=3, client=0),
        make_node(1, prompt="ba be bi", prompt_tokens=3, client=1),
    ]
    state = SessionState(SessionSpec(1, nodes), ns(0.5), cancel_on_failure=False)
    state.start()
    writer = ResultWriter(tmp_path, make_metadata(), t0_ns=T0)
    recorder = RunRecorder(
        "run-1",
        "m",
        T0,
        writer,
        BuiltinTokenizer(),
        clients=[("a", "m-a"), ("b", "m-b")],
        tokenizers=[BuiltinTokenizer(), CharTokenizer()],
    )
    for node_id in (0, 1):
        state.mark_dispatched(node_id)
        request = InFlight(state, node_id, 7 + node_id, ns(0.5), ns(0.8), 2, history_tokens=0)
        recorder.request_done(request, make_result(prompt_tokens=None), ns(2.0))
    writer.close()
    rows = {row["client"]: row for row in load_requests(tmp_path).to_pylist()}
    assert rows["a"]["prompt_tokens_new"] == 3  # (a vocabulary's prompt: its target)
    assert rows["b"]["prompt_tokens_new"] == len("ba be bi")  # (b's: its characters)
