"""A trace replay with several clients: each row's prompt built and counted in its own client's
tokenizer (``OpenTrace.sessions`` given each client's), deterministic per seed, and one
tokenizer's replay unchanged to the byte."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.unit.generate.other_words import OtherWords
from tests.unit.generate.traces.helpers import trace_scenario, write_csv, write_jsonl
from veeksha.generate.tokenizer import BuiltinTokenizer, TokenizerLike
from veeksha.generate.traces import open_trace

CLIENTS = {"clients": [{"name": "a", "model": "m-a"}, {"name": "b", "model": "m-b"}]}

# sha256 of every node's (client, prompt tokens, output tokens, system, prompt) of the traces
# below, replayed with one tokenizer before a trace's rows were each built in their own
# client's (main at bcb2c70): one tokenizer's replay must not change a byte
GOLDEN = {
    "builtin": "911d02c2a46a64086bb68dadb34013ae22a5f210dd6fd637a65dacf5d5f73e89",
    "other": "eec95ba1110fd7419b89da1258132f4d9d53138a57254d8240fc07a8a2b127a8",
}


def _traces(tmp_path: Path) -> list[tuple[Path, dict[str, Any], dict[str, Any]]]:
    """(file, generator settings, scenario extras) of traces of every kind of content: corpus
    prompts naming their clients (ungrouped and grouped), hash-id blocks with text, and a
    dataset's conversations (text, system message, replies)."""
    log = write_csv(
        tmp_path / "log.csv",
        "input_length,output_length,client",
        [f"{5 + 37 * i % 300},{1 + i % 7},{'ab'[i % 3 == 0]}" for i in range(40)],
    )
    chats = write_csv(
        tmp_path / "chats.csv",
        "session_id,input_length,output_length,client",
        [f"s{i % 6},{3 + 29 * i % 200},{2 + i % 5},{'ab'[i % 2]}" for i in range(30)],
    )
    blocks = write_jsonl(
        tmp_path / "blocks.jsonl",
        [
            {"input_length": 17 + i % 8, "output_length": 2, "hash_ids": [i % 3, 7, i], "text": "q"}
            for i in range(12)
        ],
    )
    dataset = tmp_path / "conversations.json"
    dataset.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "system", "value": "be brief please"},
                        {"from": "human", "value": f"question {i} about things"},
                        {"from": "gpt", "value": "an answer of several words " * (i + 1)},
                        {"from": "human", "value": "and then?"},
                        {"from": "gpt", "value": "more"},
                    ]
                }
                for i in range(5)
            ]
        )
    )
    wrap = {"wrap_mode": True}
    return [
        (log, {"flavor": {"type": "request_log"}} | wrap, CLIENTS),
        (chats, {"flavor": {"type": "request_log"}} | wrap, CLIENTS),
        (blocks, {"flavor": {"type": "shared_prefix", "block_size": 8}} | wrap, {}),
        (dataset, {"flavor": {"type": "untimed_content_multi_turn"}} | wrap, {}),
    ]


def _digest(tmp_path: Path, tokenizer: TokenizerLike) -> str:
    h = hashlib.sha256()
    for path, generator, extra in _traces(tmp_path):
        trace = open_trace(trace_scenario(path, generator=generator, **extra))
        sessions = trace.sessions(11, tokenizer)
        for i in range(2 * (trace.hi - trace.lo)):  # (two passes: the wrapped one too)
            for node in sessions.session(i).nodes:
                h.update(
                    f"{node.client}|{node.prompt_tokens}|{node.max_tokens}|{node.system}"
                    f"|{node.prompt}\n".encode()
                )
    return h.hexdigest()


def test_one_tokenizers_replay_is_unchanged_to_the_byte(tmp_path: Path) -> None:
    assert _digest(tmp_path, BuiltinTokenizer()) == GOLDEN["builtin"]
    assert _digest(tmp_path, OtherWords()) == GOLDEN["other"]


def test_clients_sharing_one_tokenizer_replay_as_one(tmp_path: Path) -> None:
    builtin = BuiltinTokenizer()
    h = hashlib.sha256()
    for path, generator, extra in _traces(tmp_path):
        scenario = trace_scenario(path, generator=generator, **extra)
        trace = open_trace(scenario)
        shared = [builtin] * len(scenario.client_entries())
        sessions = trace.sessions(11, builtin, shared)
        for i in range(2 * (trace.hi - trace.lo)):
            for node in sessions.session(i).nodes:
                h.update(
                    f"{node.client}|{node.prompt_tokens}|{node.max_tokens}|{node.system}"
                    f"|{node.prompt}\n".encode()
                )
    assert h.hexdigest() == GOLDEN["builtin"]


def _log(tmp_path: Path) -> Path:
    return write_csv(
        tmp_path / "log.csv",
        "session_id,input_length,output_length,client",
        [f"s{i % 5},{1 + 53 * i % 400},{1 + i % 7},{'ab'[i % 3 == 0]}" for i in range(60)],
    )


def test_each_rows_prompt_is_exact_in_its_own_clients_tokenizer(tmp_path: Path) -> None:
    trace = open_trace(trace_scenario(_log(tmp_path), **CLIENTS, generator={"wrap_mode": True}))
    builtin, other = BuiltinTokenizer(), OtherWords()
    theirs = trace.sessions(3, builtin, [builtin, other])
    again = trace.sessions(3, builtin, [builtin, other])
    alone = trace.sessions(3, builtin)
    own = set(other.vocabulary.words)
    seen = set()
    for i in range(2 * trace.prepared.sessions):  # (the wrapped pass too)
        nodes = theirs.session(i).nodes
        for node, same, before in zip(
            nodes, again.session(i).nodes, alone.session(i).nodes, strict=True
        ):
            seen.add(node.client)
            assert node.prompt == same.prompt  # deterministic per seed
            assert (node.client, node.prompt_tokens) == (before.client, before.prompt_tokens)
            words = node.prompt.split()
            assert len(words) == node.prompt_tokens  # exact: one token a word of its own
            assert (set(words) <= own) == (node.client == 1)
            if node.client == 0:  # (its own draws: the prompt it had with one tokenizer)
                assert node.prompt == before.prompt
    assert seen == {0, 1}


class _Doubled:
    """A tokenizer without a vocabulary (as hf is) that counts two tokens a word."""

    name = "doubled"

    def count(self, text: str) -> int:
        return 2 * len(text.split())

    def encode(self, text: str) -> list[int]:
        return [i for i, _ in enumerate(text.split()) for _ in range(2)]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join("w" for _ in ids[::2])


def test_a_rows_own_text_is_counted_in_its_clients_tokenizer(tmp_path: Path) -> None:
    # a recorded tool result's text (a timed session's row of its own content) counted in the
    # tokenizer of the client the row names
    def row(node: int, parents: list[int], client: str, **extra: Any) -> dict[str, Any]:
        context = {"node_id": node, "parent_nodes": parents, "client": client} | extra
        length = 5 if "result" in extra else 4  # (a tool's: its result's words)
        return {"session_id": 1, "new_input_length": length, "output_length": 2} | {
            "session_context": context
        }

    result = "five words of a result"
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            row(0, [], "a"),
            row(1, [0], "a", kind="tool", latency_s=0.1, result=result),
            row(2, [1], "b"),
            row(3, [2], "b", kind="tool", latency_s=0.1, result=result),
        ],
    )
    trace = open_trace(trace_scenario(path, "timed_synthetic_session", **CLIENTS))
    builtin = BuiltinTokenizer()
    nodes = trace.sessions(0, builtin, [builtin, _Doubled()]).session(0).nodes
    assert [(n.client, n.kind) for n in nodes] == [
        (0, "llm"),
        (0, "tool"),
        (1, "llm"),
        (1, "tool"),
    ]
    assert (nodes[1].prompt, nodes[1].prompt_tokens) == (result, 5)
    assert (nodes[3].prompt, nodes[3].prompt_tokens) == (result, 10)
