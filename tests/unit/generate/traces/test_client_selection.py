"""``session_generator.client_selection`` of a trace replay: the client of each row that names
none (round robin over the trace's session and node index, or weighted draws seeded by the
scenario), chosen as the cache is built, before the rows are fitted to their clients' windows
and built in their clients' tokenizers; rows naming their client keep it; absent, every such
row is the first client's and the cache's key is what it always was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.generate.other_words import OtherWords
from tests.unit.generate.traces.helpers import trace_scenario, write_csv, write_jsonl
from tests.unit.scenario.helpers import only_issue
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.generate.traces import OpenTrace, open_trace, prepare
from veeksha.scenario.models import Scenario

TOK = BuiltinTokenizer()
TWO = [{"name": "a", "model": "m-a"}, {"name": "b", "model": "m-b"}]
THREE = [*TWO, {"name": "c", "model": "m-c"}]
ROUND_ROBIN = {"type": "round_robin"}


def _scenario(
    path: Path,
    flavor: str = "request_log",
    selection: dict[str, Any] | None = ROUND_ROBIN,
    clients: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> Scenario:
    generator = {"wrap_mode": False} | extra.pop("generator", {})
    if selection is not None:
        generator["client_selection"] = selection
    return trace_scenario(path, flavor, generator=generator, clients=clients or TWO, **extra)


def _open(scenario: Scenario) -> tuple[OpenTrace, list[list[int]]]:
    """The trace and each replayed session's nodes' client indices."""
    trace = open_trace(scenario)
    sessions = trace.sessions(0, TOK, [TOK] * len(scenario.client_entries()))
    specs = [sessions.session(i) for i in range(trace.prepared.sessions)]
    return trace, [[node.client for node in spec.nodes] for spec in specs]


def _lengths(tmp_path: Path, rows: int, name: str = "t.csv") -> Path:
    return write_csv(
        tmp_path / name,
        "input_length,output_length",
        [f"{5 + i % 40},{1 + i % 5}" for i in range(rows)],
    )


def test_without_it_every_unnamed_row_is_the_first_clients(tmp_path: Path) -> None:
    _, clients = _open(_scenario(_lengths(tmp_path, 9), selection=None))
    assert clients == [[0]] * 9


def test_round_robin_gives_session_i_client_i_mod_n(tmp_path: Path) -> None:
    _, clients = _open(_scenario(_lengths(tmp_path, 9), clients=THREE))
    assert clients == [[i % 3] for i in range(9)]


def test_round_robin_gives_node_j_of_a_chat_client_i_plus_j_mod_n(tmp_path: Path) -> None:
    """Linear chats (a request_log with session_id): turns alternate between the clients, and
    consecutive sessions start on consecutive clients."""
    rows = [f"s{s},{10 + t},{2 + t}" for s in range(5) for t in range(1 + s % 3)]
    path = write_csv(tmp_path / "t.csv", "session_id,input_length,output_length", rows)
    trace, clients = _open(_scenario(path, clients=THREE))
    assert clients == [[(i + j) % 3 for j in range(1 + i % 3)] for i in range(5)]
    # the history is carried across clients as for rows naming theirs
    sessions = trace.sessions(0, TOK, [TOK] * 3)
    assert [n.history_parent for n in sessions.session(2).nodes] == [None, 0, 1]


def test_round_robin_follows_a_linked_sessions_nodes(tmp_path: Path) -> None:
    """A timed session's rows out of node order: node j (after renumbering) is (i + j) mod n."""

    def row(session: int, node: int, parents: list[int]) -> dict[str, Any]:
        context = {"node_id": node, "parent_nodes": parents}
        if parents:
            context["history_parent"] = parents[0]
        return {"session_id": session, "new_input_length": 4 + node, "output_length": 2} | {
            "session_context": context
        }

    rows = [row(0, 2, [1]), row(0, 0, []), row(0, 1, [0]), row(1, 0, []), row(1, 1, [0])]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    trace, clients = _open(_scenario(path, "timed_synthetic_session"))
    assert clients == [[0, 1, 0], [1, 0]]
    sessions = trace.sessions(0, TOK, [TOK, TOK])
    assert [n.prompt_tokens for n in sessions.session(0).nodes] == [4, 5, 6]


def test_rows_naming_their_client_keep_it(tmp_path: Path) -> None:
    """Only the unnamed rows are chosen for; a session counts whether named or not."""
    path = write_csv(
        tmp_path / "t.csv",
        "input_length,output_length,client",
        ["5,3,b", "5,3,", "5,3,a", "5,3,", "5,3,c", "5,3,"],
    )
    _, clients = _open(_scenario(path, clients=THREE))
    assert clients == [[1], [1], [0], [0], [2], [2]]
    _, before = _open(_scenario(path, selection=None, clients=THREE))
    assert before == [[1], [0], [0], [0], [2], [0]]


def test_weighted_draws_the_weights_deterministically_per_seed(tmp_path: Path) -> None:
    weighted = {"type": "weighted", "weights": {"a": 3, "b": 1}}
    path = _lengths(tmp_path, 4000)
    trace, clients = _open(_scenario(path, selection=weighted, seed=4))
    picks = [c for (c,) in clients]
    assert 0.72 < picks.count(0) / len(picks) < 0.78
    assert picks.count(1) == len(picks) - picks.count(0)
    # the same seed: the same clients from a cache built again (another file of the same rows)
    again = _lengths(tmp_path, 4000, "again.csv")
    _, same = _open(_scenario(again, selection=weighted, seed=4))
    assert same == clients
    # another seed: other draws, in another cache
    other, different = _open(_scenario(path, selection=weighted, seed=5))
    assert different != clients
    assert other.prepared.cache != trace.prepared.cache
    # a client weighing 0 (or left out) gets no row
    _, none_for_b = _open(_scenario(path, selection={"type": "weighted", "weights": {"a": 1}}))
    assert {c for (c,) in none_for_b} == {0}


def test_each_row_is_fitted_to_its_chosen_clients_window(tmp_path: Path) -> None:
    """b holds 40 tokens: the rows chosen for it that do not fit are skipped and counted by its
    window; the same rows chosen for a (no window) are replayed."""
    path = write_csv(tmp_path / "t.csv", "input_length,output_length", ["50,5"] * 6)
    clients = [TWO[0], TWO[1] | {"max_model_len": 40}]
    trace, kept = _open(_scenario(path, clients=clients))
    assert kept == [[0]] * 3
    assert trace.prepared.oversized_rows == 3
    assert trace.prepared.oversized_lines == [3, 5, 7]
    assert trace.warnings() == [
        "trace: 3 not replayed: oversized (rows of sessions longer than"
        " clients[1].max_model_len (oversized: skip))"
        "; first lines 3, 5, 7"
    ]


def test_each_row_is_built_in_its_chosen_clients_tokenizer(tmp_path: Path) -> None:
    rows = [f"s{s},{3 + 7 * t},{2 + t}" for s in range(6) for t in range(3)]
    path = write_csv(tmp_path / "t.csv", "session_id,input_length,output_length", rows)
    trace = open_trace(_scenario(path))
    other = OtherWords()
    sessions = trace.sessions(3, TOK, [TOK, other])
    own = set(other.vocabulary.words)
    seen = set()
    for i in range(trace.prepared.sessions):
        for node in sessions.session(i).nodes:
            seen.add(node.client)
            words = node.prompt.split()
            assert len(words) == node.prompt_tokens  # exact in its own client's tokens
            assert (set(words) <= own) == (node.client == 1)
    assert seen == {0, 1}


def test_mooncake_blocks_are_built_in_their_chosen_clients_tokenizer(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 10 * i, "input_length": 24, "output_length": 2, "hash_ids": [i % 2, 7 + i]}
        for i in range(6)
    ]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    flavor = {"flavor": {"type": "mooncake", "block_size": 12}}
    trace = open_trace(_scenario(path, "mooncake", generator=flavor))
    other = OtherWords()
    sessions = trace.sessions(1, TOK, [TOK, other])
    own = set(other.vocabulary.words)
    for i in range(6):
        (node,) = sessions.session(i).nodes
        assert node.client == i % 2
        assert (set(node.prompt.split()) <= own) == (node.client == 1)
        assert (other if node.client else TOK).count(node.prompt) == 24


def test_rag_warms_each_document_on_every_client_in_its_tokenizer(tmp_path: Path) -> None:
    """A document's questions go to every client, so each client's server gets the document's
    warm-up, built in that client's tokenizer (was: one warm-up per document, on whichever
    client the selection gave it, so the questions on the others found no warmed cache)."""
    rows = ["b,q1,8,1", "a,q2,16,1", "a,q3,8,1", "b,q4,8,1", "a,q5,16,1"]
    path = write_csv(tmp_path / "r.csv", "doc_id,prompt_text,input_length,output_length", rows)
    flavor = {"flavor": {"type": "rag", "block_size": 8}}
    trace, clients = _open(_scenario(path, "rag", generator=flavor))
    # a (3 rows) then b (2): each on client 0 and client 1, then the rows in round robin
    assert trace.warmup == trace.prepared.warmup_sessions == 4
    assert clients == [[0], [1], [0], [1]] + [[i % 2] for i in range(4, 9)]
    assert (
        "9 requests in 9 sessions (5 from the trace's rows and 4 warm-up(s), one per"
        " document and client, before them)" in trace.describe()
    )
    other = OtherWords()
    sessions = trace.sessions(1, TOK, [TOK, other])
    nodes = [sessions.session(i).nodes[0] for i in range(9)]
    warm = {(n.client, n.prompt_tokens): n.prompt for n in nodes[:4]}
    assert sorted(warm) == [(0, 8), (0, 16), (1, 8), (1, 16)]
    own = set(other.vocabulary.words)
    for node, row in zip(nodes[4:], rows, strict=True):
        doc_tokens = int(row.split(",")[2])
        tokens = 16 if row[0] == "a" else 8  # (a warm-up: the document's longest row)
        # the question's document is its client's warm-up, up to the row's length
        document = " ".join(node.prompt.split()[:doc_tokens])
        assert warm[(node.client, tokens)].split()[:doc_tokens] == document.split()
        assert (set(document.split()) <= own) == (node.client == 1)
    # one client: one warm-up per document, as before
    single = open_trace(_scenario(path, "rag", selection=None, generator=flavor))
    assert single.warmup == 2


def test_rag_with_a_selection_has_a_cache_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = ["b,q1,8,1", "a,q2,16,1"]
    path = write_csv(tmp_path / "r.csv", "doc_id,prompt_text,input_length,output_length", rows)
    flavor = {"flavor": {"type": "rag", "block_size": 8}}
    assert _settings(monkeypatch, _scenario(path, "rag", generator=flavor)).endswith(
        "|warmups=each_client"
    )
    assert "warmups" not in _settings(
        monkeypatch, _scenario(path, "rag", selection=None, generator=flavor)
    )


def _settings(monkeypatch: pytest.MonkeyPatch, scenario: Scenario) -> str:
    """The text the trace cache's key is made of (besides the file's identity)."""
    seen: list[str] = []
    real = prepare.cache_key

    def spy(source: Path, settings: str) -> str:
        seen.append(settings)
        return real(source, settings)

    monkeypatch.setattr(prepare, "cache_key", spy)
    open_trace(scenario)
    return seen[-1]


def test_the_cache_key_holds_the_selection_and_is_unchanged_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _lengths(tmp_path, 4)
    flavor = '{"type":"request_log"}'
    assert _settings(monkeypatch, _scenario(path, selection=None)) == f"{flavor}|None"
    alone = trace_scenario(path, generator={"client_selection": ROUND_ROBIN})
    assert _settings(monkeypatch, alone) == f"{flavor}|None"  # (one client: no effect)
    round_robin = _settings(monkeypatch, _scenario(path))
    assert round_robin.startswith(f"{flavor}|None|client_selection=")
    assert '["a", "b"]' in round_robin
    assert _settings(monkeypatch, _scenario(path, seed=9)) == round_robin  # (no draws)
    assert _settings(monkeypatch, _scenario(path, clients=TWO[::-1])) != round_robin
    weighted = {"type": "weighted", "weights": {"a": 3, "b": 1}}
    keys = {
        _settings(monkeypatch, _scenario(path, selection=weighted, seed=seed)) for seed in (1, 2)
    }
    assert len(keys) == 2
    assert round_robin not in keys


def test_a_changed_selection_never_reuses_the_cache(tmp_path: Path) -> None:
    path = _lengths(tmp_path, 6)
    first, clients = _open(_scenario(path))
    assert not first.prepared.reused
    again, same = _open(_scenario(path))
    assert again.prepared.reused
    assert same == clients
    plain, unnamed = _open(_scenario(path, selection=None))
    assert not plain.prepared.reused
    assert unnamed == [[0]] * 6


def test_with_one_client_it_is_accepted_and_changes_nothing(tmp_path: Path) -> None:
    path = _lengths(tmp_path, 5)
    scenario = trace_scenario(path, generator={"client_selection": ROUND_ROBIN})
    trace = open_trace(scenario)
    sessions = trace.sessions(0, TOK)
    assert [sessions.session(i).nodes[0].client for i in range(5)] == [0] * 5


def test_weights_naming_an_unknown_client_are_refused_at_their_line() -> None:
    text = (
        "clients:\n"
        "  - {name: a, model: m-a}\n"
        "  - {name: b, model: m-b}\n"
        "session_generator:\n"
        "  type: trace\n"
        "  trace_file: t.csv\n"
        "  client_selection:\n"
        "    type: weighted\n"
        "    weights: {a: 1, huge: 2}\n"
    )
    issue = only_issue(text)
    assert issue.line == 9
    assert issue.path == "session_generator.client_selection.weights.huge"
    assert "unknown client 'huge'; the clients are: 'a', 'b'" in issue.message
