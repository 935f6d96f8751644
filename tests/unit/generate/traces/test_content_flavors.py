"""The content flavors and public formats: parsing, prompts from content, errors with file:line,
determinism, wrap remapping, auto-detection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.generate.traces.helpers import trace_scenario, write_csv, write_jsonl
from veeksha.evaluate.trace_sharing import SharedPrefixes, segments
from veeksha.generate.spec import SessionSpec
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.generate.traces import TraceFileError, open_trace
from veeksha.generate.traces.detect import detect_flavor

TOK = BuiltinTokenizer()


def _sessions(
    path: Path, flavor: dict[str, Any], seed: int = 1, wrap: bool = False
) -> list[SessionSpec]:
    scenario = trace_scenario(path, generator={"flavor": flavor, "wrap_mode": wrap})
    trace = open_trace(scenario)
    made = trace.sessions(seed, TOK)
    count = (trace.hi - trace.lo) * (2 if wrap else 1)
    return [made.session(i) for i in range(count)]


# ------------------------------------------------------------------------------- shared prefix


def test_equal_hash_ids_are_identical_blocks_and_the_last_block_may_be_partial(
    tmp_path: Path,
) -> None:
    rows = [
        {"input_length": 20, "output_length": 2, "hash_ids": [7, 8, 9]},
        {"input_length": 17, "output_length": 3, "hash_ids": [7, 8, 4]},
        {"input_length": 5, "output_length": 1, "hash_ids": [8]},
    ]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    a, b, c = (s.nodes[0] for s in _sessions(path, {"type": "shared_prefix", "block_size": 8}))
    wa, wb, wc = a.prompt.split(), b.prompt.split(), c.prompt.split()
    assert (len(wa), len(wb), len(wc)) == (20, 17, 5)
    assert (a.prompt_tokens, b.prompt_tokens, c.prompt_tokens) == (20, 17, 5)
    assert wa[:16] == wb[:16]  # ids 7, 8
    assert wa[16:] != wb[16:]  # 9 vs 4 (partial blocks of 4 and 1 tokens)
    assert wc == wa[8:13]  # id 8's block, cut at 5 tokens


def test_blocks_longer_than_their_head_are_exact_and_cut_at_any_length(tmp_path: Path) -> None:
    # a block of 100: 16 words drawn one by one, then chunks of 16 words (the last one cut)
    rows = [
        {"input_length": 150, "output_length": 2, "hash_ids": [1, 2]},
        {"input_length": 200, "output_length": 2, "hash_ids": [1, 3]},
        {"input_length": 37, "output_length": 2, "hash_ids": [2]},
        {"input_length": 100, "output_length": 2, "hash_ids": [2]},
        {"input_length": 9, "output_length": 2, "hash_ids": [4]},
    ]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    nodes = [s.nodes[0] for s in _sessions(path, {"type": "shared_prefix", "block_size": 100})]
    words = [n.prompt.split(" ") for n in nodes]
    assert [len(w) for w in words] == [n.prompt_tokens for n in nodes] == [150, 200, 37, 100, 9]
    assert words[0][:100] == words[1][:100]  # id 1
    assert words[0][100] != words[1][100]  # 2 vs 3 differ from their first word
    assert words[2] == words[0][100:137] == words[3][:37]  # id 2 cut at 37 and 50 words
    assert words[3][:50] == words[0][100:]
    assert all(w in TOK.vocabulary.words for w in words[1])  # (one token each)
    assert len(set(words[4])) > 1


def test_hash_id_prompts_are_made_per_session_not_for_a_whole_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a piece's 256 prompts were made at once when its first session was asked for: a
    # Mooncake piece (~20 new blocks a request) held the traffic loop for 100s of ms
    from veeksha.generate.traces.content import TraceContent

    rows = [
        {"timestamp": 10 * i, "input_length": 40, "output_length": 2, "hash_ids": [0, i + 1]}
        for i in range(300)
    ]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    made = open_trace(
        trace_scenario(path, generator={"flavor": {"type": "mooncake", "block_size": 32}})
    ).sessions(3, TOK)
    prompts = [made.session(i).nodes[0].prompt for i in (5, 0, 299)]
    calls: list[list[int]] = []
    real = TraceContent.blocks_text

    def counted(self: TraceContent, p: int, hash_ids: list[int], tokens: int) -> str:
        calls.append(hash_ids)
        return real(self, p, hash_ids, tokens)

    monkeypatch.setattr(TraceContent, "blocks_text", counted)
    fresh = open_trace(
        trace_scenario(path, generator={"flavor": {"type": "mooncake", "block_size": 32}})
    ).sessions(3, TOK)
    assert fresh.session(0).nodes[0].prompt == prompts[1]
    assert calls == [[0, 1]]  # session 0's prompt only
    assert [fresh.session(i).nodes[0].prompt for i in (5, 299)] == [prompts[0], prompts[2]]
    assert calls == [[0, 1], [0, 6], [0, 300]]
    assert fresh.session(5).nodes[0].prompt == prompts[0]  # (made once)
    assert len(calls) == 3


def test_blocks_follow_the_seed_and_a_wrapped_pass_remaps_the_ids(tmp_path: Path) -> None:
    rows = [{"input_length": 8, "output_length": 2, "hash_ids": [1]} for _ in range(3)]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    first = _sessions(path, {"type": "shared_prefix", "block_size": 8}, seed=5, wrap=True)
    again = _sessions(path, {"type": "shared_prefix", "block_size": 8}, seed=5, wrap=True)
    other = _sessions(path, {"type": "shared_prefix", "block_size": 8}, seed=6)
    prompts = [s.nodes[0].prompt for s in first]
    assert prompts == [s.nodes[0].prompt for s in again]
    assert len(set(prompts[:3])) == 1  # pass 0: one block id, one text
    assert len(set(prompts[3:])) == 1  # pass 1: the same sharing ...
    assert prompts[3] != prompts[0]  # ... under a fresh id
    assert other[0].nodes[0].prompt != prompts[0]


@pytest.mark.parametrize("fixture", ["wordlevel_json", "bpe_json"])
def test_blocks_are_exactly_block_size_tokens_of_an_hf_tokenizer(
    tmp_path: Path, request: pytest.FixtureRequest, fixture: str
) -> None:
    from veeksha.generate.tokenizer import HfTokenizerAdapter

    hf = HfTokenizerAdapter(str(request.getfixturevalue(fixture)))
    rows = [
        {"input_length": 20, "output_length": 2, "hash_ids": [7, 8, 9]},
        {"input_length": 17, "output_length": 3, "hash_ids": [7, 8, 4]},
        {"input_length": 5, "output_length": 1, "hash_ids": [8]},
    ]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    scenario = trace_scenario(
        path, generator={"flavor": {"type": "shared_prefix", "block_size": 8}}
    )
    made = open_trace(scenario).sessions(1, hf)
    a, b, c = (made.session(i).nodes[0] for i in range(3))
    ta, tb, tc = (hf.encode(n.prompt) for n in (a, b, c))
    assert [len(ta), len(tb), len(tc)] == [20, 17, 5]  # the trace's lengths, in its tokens
    assert (a.prompt_tokens, b.prompt_tokens, c.prompt_tokens) == (20, 17, 5)
    assert ta[:16] == tb[:16]  # blocks 7 and 8: the same 16 tokens
    assert ta[16:] != tb[16:]
    assert hf.encode(a.prompt.split(" ", 8)[8])[:5] == tc  # block 8 alone opens c's prompt


@pytest.mark.parametrize("fixture", ["wordlevel_json", "bpe_json"])
def test_blocks_of_chunks_are_exactly_block_size_tokens_of_an_hf_tokenizer(
    tmp_path: Path, request: pytest.FixtureRequest, fixture: str
) -> None:
    from veeksha.generate.tokenizer import HfTokenizerAdapter

    hf = HfTokenizerAdapter(str(request.getfixturevalue(fixture)))
    rows = [
        {"input_length": 75, "output_length": 2, "hash_ids": [7, 8]},
        {"input_length": 61, "output_length": 3, "hash_ids": [7, 4]},
    ]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    scenario = trace_scenario(
        path, generator={"flavor": {"type": "shared_prefix", "block_size": 40}}
    )
    made = open_trace(scenario).sessions(1, hf)
    a, b = (made.session(i).nodes[0] for i in range(2))
    ta, tb = hf.encode(a.prompt), hf.encode(b.prompt)
    assert [len(ta), len(tb)] == [a.prompt_tokens, b.prompt_tokens] == [75, 61]
    assert ta[:40] == tb[:40]
    assert ta[40] != tb[40]


def test_a_session_adds_new_tokens_with_history_and_mooncake_derives_them(tmp_path: Path) -> None:
    rows = [
        {
            "session_id": "s",
            "timestamp": 0,
            "input_length": 16,
            "output_length": 4,
            "hash_ids": [0, 1],
        },
        {
            "session_id": "s",
            "timestamp": 500,
            "input_length": 30,
            "output_length": 2,
            "hash_ids": [0, 1, 2, 3],
        },
        {
            "session_id": "t",
            "timestamp": 250,
            "input_length": 3,
            "output_length": 2,
            "hash_ids": [5],
        },
    ]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    s, t = _sessions(path, {"type": "mooncake", "block_size": 8})
    assert [n.prompt_tokens for n in s.nodes] == [16, 30 - 16 - 4]
    assert s.nodes[1].history_parent == 0
    assert len(t.nodes) == 1
    trace = open_trace(
        trace_scenario(path, generator={"flavor": {"type": "mooncake", "block_size": 8}})
    )
    assert list(trace.table.starts(0)[1]) == [0.0, 0.25]  # milliseconds → seconds
    rows[1]["new_input_length"] = 9
    write_jsonl(path, rows)
    s, _ = _sessions(path, {"type": "mooncake", "block_size": 8})
    assert s.nodes[1].prompt_tokens == 9
    path = write_jsonl(tmp_path / "p.jsonl", [*rows[:1], {**rows[1], "new_input_length": None}])
    with pytest.raises(TraceFileError, match=r"p\.jsonl:2: a later turn of a session needs"):
        _sessions(path, {"type": "shared_prefix", "block_size": 8})


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"input_length": 9, "output_length": 1, "hash_ids": [0]}, "does not fit 1 hash ids"),
        ({"input_length": 8, "output_length": 1, "hash_ids": [0, 1]}, "more than 8 and at most 16"),
        ({"input_length": 8, "output_length": 1, "hash_ids": []}, "hash_ids is empty"),
        ({"input_length": 8, "output_length": 1, "hash_ids": "x"}, "not a list of integers"),
        ({"input_length": 8, "output_length": 1}, "no 'hash_ids' in this row"),
    ],
)
def test_bad_hash_ids_name_their_line(tmp_path: Path, row: dict[str, Any], message: str) -> None:
    good = {"input_length": 8, "output_length": 1, "hash_ids": [0]}
    path = write_jsonl(tmp_path / "p.jsonl", [good, row])
    with pytest.raises(TraceFileError, match=rf"p\.jsonl:2: .*{message}"):
        _sessions(path, {"type": "shared_prefix", "block_size": 8})


def test_shared_prefixes_measure_the_longest_common_prefix_in_tokens() -> None:
    seen = SharedPrefixes()
    seen.add(segments([1, 2, 3], 20, 8, None))
    assert seen.shared(segments([1, 2, 9], 24, 8, None)) == 16
    assert seen.shared(segments([1, 2, 3], 24, 8, None)) == 20  # id 3: 4 tokens seen
    assert seen.shared(segments([1, 2], 12, 8, None)) == 12
    assert seen.shared(segments([2], 8, 8, None)) == 0
    seen.add(segments([1], 8, 8, "why so"))
    assert seen.shared(segments([1], 8, 8, "why so")) == 10
    assert seen.shared(segments([1], 8, 8, "why not")) == 8


# ------------------------------------------------------------------------------- conversations


def test_conversations_with_configured_keys(tmp_path: Path) -> None:
    rows = [
        {
            "messages": [
                {"role": "assistant", "content": "welcome"},
                {"role": "user", "content": "one"},
                {"role": "user", "content": "two three"},
                {"role": "assistant", "content": "four five six"},
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": "seven"},
                {"role": "assistant", "content": "eight"},
            ]
        },
        {"messages": [{"role": "assistant", "content": "only an answer"}]},
    ]
    path = tmp_path / "d.json"
    path.write_text(json.dumps(rows))
    flavor = {
        "type": "untimed_content_multi_turn",
        "conversation_column": "messages",
        "role_key": "role",
        "content_key": "content",
        "user_role_value": "user",
        "assistant_role_value": "assistant",
        "system_role_value": "developer",
    }
    (session,) = _sessions(path, flavor)
    first, second = session.nodes
    assert first.prompt == "one\n\ntwo three"
    assert first.system == "be brief"
    assert (first.prompt_tokens, first.max_tokens) == (3 + 2, 3)
    assert (second.prompt, second.prompt_tokens, second.max_tokens) == ("seven", 1, 1)
    assert second.system is None
    trace = open_trace(trace_scenario(path, generator={"flavor": flavor}))
    assert trace.prepared.warnings() == [  # both leading answers; the whole array is line 1
        "trace: 2 not replayed: unanswered_turns (leading assistant turns or user turns without"
        " a reply); first lines 1",
        "trace: 1 not replayed: conversations_without_reply (conversations without an answered"
        " user turn); first lines 1",
    ]


def test_a_conversation_message_without_text_names_its_line(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [
            {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]},
            {"conversations": [{"from": "human"}]},
        ],
    )
    with pytest.raises(TraceFileError, match=r"c\.jsonl:2: message 0 of conversations has no text"):
        _sessions(path, {"type": "untimed_content_multi_turn"})


# ------------------------------------------------------------------------------ public formats


def test_azure_timestamps_with_or_without_an_offset_are_seconds(tmp_path: Path) -> None:
    for stamp in ("2024-05-10 00:00:00.009329+00:00", "2024-05-10 00:00:00.0093290"):
        path = write_csv(
            tmp_path / "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens",
            [f"{stamp},3,4", "2024-05-10 00:00:01.509329" + stamp[26:] + ",5,6"],
        )
        trace = open_trace(trace_scenario(path, "azure_llm"))
        starts = trace.table.starts(0)[1]
        assert starts[1] - starts[0] == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (
            "2023-11-16 18:15:46.6805900",
            "2023-11-16 18:15:47.6805900+00:00",
            "a.csv:3: TIMESTAMP = '2023-11-16 18:15:47.6805900+00:00' has a UTC offset while"
            " line 2's has none; give every row an offset (e.g. +00:00) or none",
        ),
        (
            "2023-11-16 18:15:46.6805900Z",
            "2023-11-16 18:15:47.6805900",
            "a.csv:3: TIMESTAMP = '2023-11-16 18:15:47.6805900' has no UTC offset while"
            " line 2's has one; give every row an offset (e.g. +00:00) or none",
        ),
    ],
)
def test_azure_timestamps_with_and_without_an_offset_in_one_file_are_refused_at_their_line(
    tmp_path: Path, first: str, second: str, expected: str
) -> None:
    # (the batch was cast as zoned and the one-row re-check found no bad row: a traceback)
    path = write_csv(
        tmp_path / "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens", [f"{first},3,4"]
    )
    path.write_text(path.read_text() + f"{second},5,6\n")
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(path, "azure_llm"))
    assert str(caught.value) == f"{tmp_path}/{expected}"
    assert caught.value.exit_code == 2


def test_azure_timestamps_with_and_without_an_offset_are_refused_across_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("veeksha.generate.traces.reader._CSV_BLOCK", 64)  # a batch a row or two
    rows = [f"2023-11-16 18:15:{10 + i}.6805900,3,4" for i in range(6)]
    rows.append("2023-11-16 18:15:59.6805900+00:00,3,4")
    path = write_csv(tmp_path / "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens", rows)
    with pytest.raises(TraceFileError, match=r"a\.csv:8: .* has a UTC offset while line 2's"):
        open_trace(trace_scenario(path, "azure_llm"))


def test_burstgpt_failed_requests_are_one_account_with_their_lines(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "b.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
        [
            "5,ChatGPT,472,18,490,Conversation log",
            "45,ChatGPT,1087,0,1087,Conversation log",
            "118,GPT-4,417,276,693,API log",
            "120,GPT-4,417,0,417,API log",
        ],
    )
    trace = open_trace(trace_scenario(path, "burstgpt"))
    assert trace.describe() == (
        f"burstgpt trace {path}: 2 requests in 2 sessions; the warnings below say which rows are"
        " not replayed as the trace has them"
    )
    assert trace.prepared.warnings() == [
        "trace: 2 not replayed: failed_request (rows with 0 Response tokens, as BurstGPT records"
        " a failed request, or 0 Request tokens: nothing to replay); first lines 3, 5"
    ]
    assert trace.summary()["not_replayed"] == {"failed_request": 2}


def test_rag_keeps_the_most_frequent_documents_ties_by_first_seen(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "r.csv",
        "doc_id,prompt_text,input_length,output_length",
        ["b,q1,8,1", "a,q2,8,1", "c,q3,8,1", "a,q4,8,1", "b,q5,8,1"],
    )
    sessions = _sessions(path, {"type": "rag", "num_documents": 2, "block_size": 8})
    prompts = [s.nodes[0].prompt for s in sessions]
    assert len(prompts) == 2 + 4  # 2 warm-ups (b, a), then the rows of b and a
    doc_b, doc_a = prompts[0], prompts[1]
    assert prompts[2:] == [f"{doc_b} q1", f"{doc_a} q2", f"{doc_a} q4", f"{doc_b} q5"]
    trace = open_trace(
        trace_scenario(path, generator={"flavor": {"type": "rag", "num_documents": 2}})
    )
    assert trace.prepared.warmup_sessions == 2
    assert trace.summary()["warmup_sessions"] == 2


def test_rag_counts_say_they_hold_the_warm_ups_and_the_rows_left_out_are_named(
    tmp_path: Path,
) -> None:
    rows = ["b,q1,8,1", "a,q2,8,1", "c,q3,8,1", "a,q4,8,1", "d,q5,8,1", "b,q6,8,1", "c,q7,8,1"]
    path = write_csv(tmp_path / "r.csv", "doc_id,prompt_text,input_length,output_length", rows)
    trace = open_trace(
        trace_scenario(path, generator={"flavor": {"type": "rag", "num_documents": 2}})
    )
    assert (trace.prepared.rows, trace.prepared.sessions) == (2 + 4, 2 + 4)
    assert trace.describe() == (
        f"rag trace {path}: 6 requests in 6 sessions (4 from the trace's rows and 2 warm-up(s),"
        " one per document, before them); the warnings below say which rows are not replayed"
        " as the trace has them"
    )
    assert trace.prepared.warnings() == [
        "trace: 3 not replayed: other_documents (rows of 2 document(s) beyond the 2 most"
        " frequent (num_documents)); first lines 4, 6, 8"
    ]
    summary = trace.summary()
    assert (summary["rows"], summary["warmup_sessions"]) == (6, 2)
    assert summary["not_replayed"] == {"other_documents": 3}


def test_a_rag_document_of_0_tokens_in_its_first_row_still_warms_up_and_no_row_turns_warm_up(
    tmp_path: Path,
) -> None:
    # the warm-up is the document's longest input_length; a document of 0 tokens in every row
    # has none (nothing to cache); the first rows after the warm-ups are the file's first rows
    rows = ["manual,how do I reset,0,6", "faq,is it free,90,3", "manual,where is it,200,4"]
    rows += ["none,hello,0,3", "faq,who wrote this,70,0"]
    path = write_csv(tmp_path / "r.csv", "doc_id,prompt_text,input_length,output_length", rows)
    scenario = trace_scenario(path, generator={"flavor": {"type": "rag", "block_size": 64}})
    trace = open_trace(scenario)
    assert trace.warmup == trace.prepared.warmup_sessions == 2  # manual and faq, not none
    made = trace.sessions(1, TOK)
    nodes = [made.session(i).nodes[0] for i in range(trace.hi)]
    assert [(n.prompt_tokens, n.max_tokens) for n in nodes] == [
        (200, 1),  # manual's warm-up: its longest row's document
        (90, 1),  # faq's
        (4, 6),  # line 2: its question alone (a document of 0 tokens), measured
        (93, 3),
        (203, 4),
        (1, 3),  # line 5: the 0-token document's question
    ]
    # the one row not replayed is the file's own row of output 0, named by its line
    assert trace.prepared.not_replayed() == {"zero_length": 1}
    assert trace.prepared.unservable_lines == [6]


def test_a_rag_warm_up_longer_than_the_context_is_counted_apart_and_shifts_nothing(
    tmp_path: Path,
) -> None:
    rows = ["big,q1,100,2", "small,q2,8,2", "big,q3,10,2", "small,q4,8,2"]
    path = write_csv(tmp_path / "r.csv", "doc_id,prompt_text,input_length,output_length", rows)
    trace = open_trace(
        trace_scenario(
            path,
            generator={"flavor": {"type": "rag", "block_size": 8}},
            client={"type": "openai_completions", "max_model_len": 50},
        )
    )
    # big's warm-up (100 tokens) is not sent: one warm-up (small's), then the rows q2, q3, q4
    assert trace.warmup == 1
    made = trace.sessions(1, TOK)
    tokens = [made.session(i).nodes[0].prompt_tokens for i in range(trace.hi)]
    assert tokens == [8, 9, 11, 9]
    assert trace.prepared.not_replayed() == {"oversized": 1, "oversized_warmups": 1}
    assert trace.prepared.oversized_lines == [2]  # q1, the row
    assert trace.prepared.warnings()[1].startswith(
        "trace: 1 not replayed: oversized_warmups (rag warm-ups (not rows of the file) of"
    )
    assert trace.prepared.warnings()[1].endswith("; first lines 2")


@pytest.mark.parametrize(
    ("name", "text", "flavor"),
    [
        ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "azure_llm"),
        (
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n",
            "burstgpt",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0]}\n',
            "mooncake",
        ),
        ("s.jsonl", '{"input_length": 1, "output_length": 1, "hash_ids": [0]}\n', "shared_prefix"),
        ("c.json", '[{"conversations": []}]', "untimed_content_multi_turn"),
        ("r.csv", "doc_id,prompt_text,input_length,output_length\n", "rag"),
        ("l.csv", "input_length,output_length\n", "request_log"),
        (
            "t.jsonl",
            '{"session_id": 1, "new_input_length": 3, "output_length": 1}\n',
            "timed_synthetic_session",
        ),
        ("x.csv", "what,ever\n", "timed_synthetic_session"),
        ("p.jsonl", '{"prompt": "hi", "output_length": 3}\n', "prompts"),
        ("p.csv", "text\nhello\n", "prompts"),
    ],
)
def test_the_flavor_is_detected_from_the_header_or_first_row(
    tmp_path: Path, name: str, text: str, flavor: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert detect_flavor(path).type == flavor  # type: ignore[attr-defined]


@pytest.mark.parametrize("flavor", ["auto", "azure_llm"])
@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            "Timestamp,ContextTokens,GeneratedTokens",
            "a.csv:1: no column 'TIMESTAMP' (columns: Timestamp, ContextTokens, GeneratedTokens);"
            " rename 'Timestamp' to 'TIMESTAMP' (names are matched exactly)",
        ),
        (
            "TIMESTAMP,Context Tokens,GeneratedTokens",
            "a.csv:1: no column 'ContextTokens' (columns: TIMESTAMP, Context Tokens,"
            " GeneratedTokens); rename 'Context Tokens' to 'ContextTokens' (names are matched"
            " exactly)",
        ),
    ],
)
def test_a_public_header_with_a_misspelt_name_is_told_and_the_rename_named(
    tmp_path: Path, header: str, expected: str, flavor: str
) -> None:
    # with flavor auto it was read as timed_synthetic_session: "no column 'session_id'; add it"
    path = write_csv(tmp_path / "a.csv", header, ["2023-11-16 18:15:46.6805900,374,44"])
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(path, flavor))
    assert str(caught.value) == f"{tmp_path}/{expected}"


def test_a_burstgpt_header_with_underscores_is_detected_as_burstgpt(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request_tokens,Response_tokens,Total tokens,Log Type\n")
    assert detect_flavor(path).type == "burstgpt"  # type: ignore[attr-defined]


def test_run_log_says_how_long_the_arrivals_span_in_the_units_the_timestamps_were_read_in(
    tmp_path: Path,
) -> None:
    # a Mooncake trace converted to seconds (read as milliseconds) replayed 1000x too fast with
    # nothing in run.log to show it: the span, its unit and the replay's length now are
    rows = [
        {"timestamp": t, "input_length": 5, "output_length": 2, "hash_ids": [0]}
        for t in (0, 1.5, 3.052)
    ]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    scenario = trace_scenario(
        path,
        generator={"flavor": {"type": "mooncake", "block_size": 8}},
        traffic_scheduler={"type": "trace", "speedup": 2.0},
    )
    assert open_trace(scenario).describe() == (
        f"mooncake trace {path}: 3 requests in 3 sessions; arrivals over 0.003 s of the trace"
        " (its timestamps read as milliseconds): 0.002 s at speedup 2"
    )
