"""client.headers and client.session_header: validation, ${NAME} resolution, masking."""

from __future__ import annotations

import pytest

from veeksha.dispatch.settings import (
    HeaderVariableMissing,
    WorkerSettings,
    client_secrets,
    resolve_api_key,
    resolve_headers,
)
from veeksha.errors import ConfigurationError
from veeksha.redact import masked_headers, secret_header
from veeksha.scenario.loader import dump_resolved_yaml
from veeksha.scenario.overrides import override_label

from .helpers import load, only_issue


def _client_issue(headers: str, more: str = "") -> tuple[int | None, str, str]:
    issue = only_issue(f"client:\n{more}  headers:\n{headers}")
    return issue.line, issue.path, issue.message


def test_headers_and_session_header_load() -> None:
    client = load(
        "client:\n  headers: {X-Tenant: acme, X-Shard: 42}\n  session_header: X-Session-Id\n"
    ).client
    assert client.headers == {"X-Tenant": "acme", "X-Shard": "42"}  # (a number is its text)
    assert client.session_header == "X-Session-Id"


def test_a_name_that_is_no_token_is_refused_at_its_line() -> None:
    line, path, message = _client_issue("    X-Ok: 1\n    'Bad Name': x\n")
    assert (line, path) == (4, "client.headers.Bad Name")
    assert "is not a header name (' ':" in message


@pytest.mark.parametrize(
    "name", ["Host", "content-length", "Content-Type", "TRANSFER-ENCODING", "Connection", "Accept"]
)
def test_headers_veeksha_sets_are_refused_whatever_their_case(name: str) -> None:
    line, path, message = _client_issue(f"    {name}: x\n")
    assert (line, path) == (3, f"client.headers.{name}")
    assert message == f"veeksha sets {name} itself: remove it"


def test_a_line_break_in_a_value_is_refused_without_quoting_it() -> None:
    _, path, message = _client_issue('    X-Api-Key: "sk-secret\\r\\nX-Evil: 1"\n')
    assert path == "client.headers.X-Api-Key"
    assert "line break (CR or LF)" in message
    assert "sk-secret" not in message


def test_a_value_of_the_wrong_type_is_not_quoted() -> None:
    _, path, message = _client_issue("    X-Api-Key: true\n")
    assert path == "client.headers.X-Api-Key"
    assert message == "must be a valid string (got ***)"  # (any header: it may be a key)


def test_a_name_given_twice_in_two_cases_is_refused() -> None:
    _, path, message = _client_issue("    X-Tenant: a\n    x-tenant: b\n")
    assert path == "client.headers.x-tenant"
    assert "given twice ('X-Tenant' and 'x-tenant')" in message


def test_authorization_is_refused_beside_an_api_key_and_allowed_without() -> None:
    _, path, message = _client_issue("    Authorization: Basic abc\n", "  api_key: sk-1\n")
    assert path == "client.headers.Authorization"
    assert "api_key sends Authorization: Bearer" in message
    _, _, message = _client_issue("    authorization: x\n", "  api_key_env: MY_KEY\n")
    assert "remove api_key_env, or this header" in message
    client = load("client:\n  headers: {Authorization: SharedKey abc}\n").client
    assert client.headers == {"Authorization": "SharedKey abc"}


def test_an_authorization_header_replaces_the_default_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-habit")
    assert resolve_api_key(load("client: {}\n").client) == "sk-from-habit"
    client = load("client:\n  headers: {Authorization: SharedKey abc}\n").client
    assert resolve_api_key(client) is None


def test_user_agent_may_be_set() -> None:
    assert load("client:\n  headers: {User-Agent: my-bench}\n").client.headers


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Content-Type", "veeksha sets Content-Type itself"),
        ("Authorization", "veeksha sets Authorization itself"),
        ("X Session", "is not a header name"),
    ],
)
def test_a_session_header_veeksha_sets_or_no_name_is_refused(name: str, expected: str) -> None:
    issue = only_issue(f"client:\n  session_header: '{name}'\n")
    assert (issue.line, issue.path) == (2, "client.session_header")
    assert expected in issue.message


def test_a_session_header_also_in_headers_is_refused() -> None:
    issue = only_issue("client:\n  headers: {x-session-id: a}\n  session_header: X-Session-Id\n")
    assert issue.path == "client.session_header"
    assert "headers sets x-session-id too" in issue.message


def test_clients_entries_take_headers_too() -> None:
    issue = only_issue("clients:\n  - name: a\n    headers: {Host: x}\n")
    assert (issue.line, issue.path) == (3, "clients[0].headers.Host")


def test_variables_are_read_when_resolved() -> None:
    client = load(
        "client:\n  headers: {X-Api-Key: '${K}', Authorization: 'Token ${K}', X-T: acme}\n"
    ).client
    assert resolve_headers(client, {"K": "abc"}) == {
        "X-Api-Key": "abc",
        "Authorization": "Token abc",
        "X-T": "acme",
    }
    with pytest.raises(HeaderVariableMissing) as missing:
        resolve_headers(client, {})
    assert (missing.value.header, missing.value.variable) == ("X-Api-Key", "K")
    assert "${K} is not set (or is empty) in this environment: export K" in str(missing.value)
    with pytest.raises(HeaderVariableMissing, match="line break"):
        resolve_headers(client, {"K": "a\nb"})


def test_an_unset_variable_is_refused_at_the_line_that_names_it(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    from veeksha.engine.target import TargetContext
    from veeksha.scenario.loader import load_scenario

    monkeypatch.delenv("S20C_UNSET", raising=False)
    path = Path(str(tmp_path)) / "s.yaml"
    path.write_text("client:\n  headers:\n    X-Tenant: a\n    X-Api-Key: '${S20C_UNSET}'\n")
    scenario = load_scenario(path)
    with pytest.raises(ConfigurationError) as error, TargetContext(scenario):
        pass
    assert str(error.value) == (
        f"{path}:4:5: client.headers.X-Api-Key: ${{S20C_UNSET}} is not set (or is empty) in "
        "this environment: export S20C_UNSET, or write the header's value in the scenario"
    )


def test_credential_like_names() -> None:
    secret = ["Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "api-key"]
    secret += ["X-Auth-Token", "X-Client-Secret", "X-Session-Id", "X-Password"]
    assert all(secret_header(name) for name in secret)
    assert not any(secret_header(name) for name in ["X-Tenant", "X-Route", "User-Agent"])


def test_resolved_config_masks_literal_credentials_and_keeps_variables() -> None:
    scenario = load(
        "client:\n"
        "  headers: {X-Api-Key: sk-literal-1, X-Token: '${TOK}', X-Tenant: acme}\n"
        "simulator:\n"
        "  required_headers: {X-Api-Key: sk-literal-1}\n"
    )
    text = dump_resolved_yaml(scenario)
    assert "sk-literal-1" not in text
    assert "X-Api-Key: '***'" in text
    assert "X-Token: ${TOK}" in text
    assert "X-Tenant: acme" in text
    assert masked_headers({"Cookie": "a=b"}) == {"Cookie": "***"}


def test_secrets_hold_credentials_and_long_variables() -> None:
    client = load(
        "client:\n"
        "  headers: {X-Api-Key: sk-literal-1, X-Route: '${ROUTE}', X-Zone: '${ZONE}',"
        " Authorization: 'Basic ${B}'}\n"
    ).client
    env = {"ROUTE": "route-value-long", "ZONE": "eu", "B": "dXNlcjpwYXNz"}
    secrets = client_secrets(client, env)
    assert set(secrets) == {
        "sk-literal-1",
        "route-value-long",  # (from the environment, 8 characters or more)
        "dXNlcjpwYXNz",
        "Basic dXNlcjpwYXNz",
    }  # (ZONE=eu: too short to mask; the header is no credential)


def test_worker_settings_repr_masks_header_values() -> None:
    settings = WorkerSettings(
        endpoint="http://x/v1/completions", headers={"X-Api-Key": "sk-1"}, secrets=["sk-1"]
    )
    assert "sk-1" not in repr(settings)
    assert "'X-Api-Key': '***'" in repr(settings)


def test_an_override_of_headers_is_shown_masked() -> None:
    assert override_label("client.headers.X-Api-Key=sk-1") == "--set client.headers.X-Api-Key=***"


def test_the_simulators_required_headers_are_checked_like_a_clients() -> None:
    issue = only_issue("simulator:\n  required_headers: {'X Key': a}\n")
    assert (issue.line, issue.path) == (2, "simulator.required_headers.X Key")
    assert "is not a header name" in issue.message
    issue = only_issue("simulator:\n  count_header: 'a:b'\n")
    assert issue.path == "simulator.count_header"


def test_each_client_resolves_its_own_headers(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    from veeksha.engine.target import resolved_headers
    from veeksha.scenario.loader import load_scenario

    monkeypatch.setenv("S20C_A", "key-a")
    monkeypatch.delenv("S20C_B", raising=False)
    path = Path(str(tmp_path)) / "s.yaml"
    path.write_text(
        "clients:\n"
        "  - name: a\n"
        "    headers: {X-Api-Key: '${S20C_A}'}\n"
        "  - name: b\n"
        "  - name: c\n"
        "    headers:\n"
        "      X-Api-Key: '${S20C_B}'\n"
    )
    scenario = load_scenario(path)
    with pytest.raises(ConfigurationError) as error:
        resolved_headers(scenario)
    assert str(error.value).startswith(f"{path}:7:7: clients[2].headers.X-Api-Key: ${{S20C_B}}")
    monkeypatch.setenv("S20C_B", "key-b")
    assert resolved_headers(scenario) == [{"X-Api-Key": "key-a"}, {}, {"X-Api-Key": "key-b"}]


def test_a_request_id_header_is_checked_as_a_session_header() -> None:
    client = load("client:\n  request_id_header: X-Request-Id\n").client
    assert client.request_id_header == "X-Request-Id"
    issue = only_issue("client:\n  request_id_header: Content-Length\n")
    assert issue.path == "client.request_id_header"
    assert "choose another name, e.g. X-Request-Id" in issue.message
    issue = only_issue("client:\n  headers: {x-request-id: a}\n  request_id_header: X-Request-Id\n")
    assert (issue.path, issue.message) == (
        "client.request_id_header",
        "headers sets x-request-id too: keep one",
    )
    both = "client:\n  session_header: X-Id\n  request_id_header: x-id\n"
    issue = only_issue(both)
    assert (issue.path, issue.message) == (
        "client.request_id_header",
        "session_header sets X-Id too: keep one",
    )


def test_a_request_id_header_changes_no_hash() -> None:
    """The id a request carries measures nothing: a scenario hashes as before the key existed
    (``911da51485``, that of ``seed: 3`` since the hash's last change), set or not."""
    from veeksha.scenario.loader import scenario_hash

    assert scenario_hash(load("seed: 3")) == "911da51485"
    with_ids = "seed: 3\nclient:\n  request_id_header: X-Request-Id\n"
    assert scenario_hash(load(with_ids)) == "911da51485"


def test_request_ids_are_prefixed_by_the_nearest_folder_named_by_its_start() -> None:
    """A run's own folder; a point's, under its experiment's (a sweep's, a capacity search's:
    the points of two sweeps share names); a shard's folder, its run's name alone."""
    from pathlib import Path

    from veeksha.dispatch.settings import request_id_prefix

    run = Path("/o/20261127T200339Z-fda33e11ce")
    assert request_id_prefix(run) == "20261127T200339Z-fda33e11ce-"
    point = Path("/o/sweep-20261127T200339Z-ab12/000-repeat=1")
    assert request_id_prefix(point) == "sweep-20261127T200339Z-ab12/000-repeat=1-"
    probe = Path("/o/capacity-20261127T200339Z-ab12/probes/003-rate=4")
    assert request_id_prefix(probe) == "capacity-20261127T200339Z-ab12/probes/003-rate=4-"
    assert request_id_prefix(Path("/tmp/veeksha-shard-x1/000-rate=2")) == "000-rate=2-"
    odd = Path("/o/sweep-20261127T200339Z-ab12/000-model=qwén")  # (a header's value: ASCII)
    assert request_id_prefix(odd) == "sweep-20261127T200339Z-ab12/000-model=qw?n-"
