"""Simulator settings, the fault stream and the wire format, without a server."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.scenario.simulator import PRESETS, SimulatorConfig
from veeksha.simulator.faults import Fault, FaultPicker
from veeksha.simulator.subword import subword_tokenizer
from veeksha.simulator.wire import (
    SPECIAL_BASE,
    TEMPLATE_PROMPT_TOKENS,
    TEMPLATE_TURN_TOKENS,
    ApiError,
    OutputText,
    chat_text,
    chat_tokens,
    parse_generation,
    special_tokens,
)

S = 1_000_000_000


def test_presets_fill_unset_fields_and_explicit_values_win() -> None:
    fast = SimulatorConfig()
    assert fast.instant
    assert fast.timing == "fixed"
    realistic = SimulatorConfig(preset="realistic", max_num_seqs=8)
    assert realistic.timing == "engine"
    assert realistic.max_num_seqs == 8
    assert realistic.decode_step_ms == PRESETS["realistic"]["decode_step_ms"]
    assert not SimulatorConfig(ttft_ms=50, itl_ms=5).instant
    dumped = realistic.model_dump()
    assert SimulatorConfig.model_validate(dumped) == realistic  # a dump is a complete record


@pytest.mark.parametrize(
    "settings",
    [
        {"unknown": 1},
        {"preset": "slow"},
        {"faults": {"http_500_rate": 0.6, "stall_rate": 0.5}},
        {"faults": {"window_start_s": 5, "window_end_s": 1}},
        {"faults": {"typo_rate": 0.1}},
        {"max_num_seqs": 0},
    ],
)
def test_invalid_settings_are_refused(settings: dict) -> None:
    with pytest.raises(ValidationError):
        SimulatorConfig(**settings)


def test_every_field_is_described() -> None:
    schema = SimulatorConfig.model_json_schema()
    for model in [schema, *schema["$defs"].values()]:
        for name, prop in model["properties"].items():
            assert prop.get("description"), name


def test_fault_stream_is_seeded_and_follows_rates() -> None:
    config = SimulatorConfig(faults={"http_500_rate": 0.2, "stall_rate": 0.3}).faults
    picks = [FaultPicker(config, seed=1, t0_ns=0) for _ in range(2)]
    draws = [[p.pick(S) for _ in range(2000)] for p in picks]
    assert draws[0] == draws[1]
    assert 0.15 < draws[0].count(Fault.HTTP_500) / 2000 < 0.25
    assert 0.25 < draws[0].count(Fault.STALL) / 2000 < 0.35
    assert draws[0] != [FaultPicker(config, seed=2, t0_ns=0).pick(S) for _ in range(2000)]


def test_fault_window_is_relative_to_server_start() -> None:
    config = SimulatorConfig(
        faults={"http_429_rate": 1.0, "window_start_s": 10, "window_end_s": 20}
    ).faults
    picker = FaultPicker(config, seed=0, t0_ns=100 * S)
    assert picker.pick(105 * S) is None
    assert picker.pick(110 * S) is Fault.HTTP_429
    assert picker.pick(120 * S) is None
    assert not FaultPicker(SimulatorConfig().faults, 0, 0).enabled


def _parse(body: bytes, kind: str = "chat"):  # type: ignore[no-untyped-def]
    return parse_generation(kind, body, "m", 16, 100)  # type: ignore[arg-type]


def test_parse_generation_limits() -> None:
    req = _parse(b'{"model":"m","messages":[{"role":"user","content":"a b"}],"max_tokens":9}')
    assert (req.max_tokens, req.min_tokens, req.stream, req.tokens) == (9, 0, False, ["a", "b"])
    both = b'{"model":"m","messages":[{"role":"user","content":"a"}],"max_tokens":9,'
    assert _parse(both + b'"max_completion_tokens":3}').max_tokens == 3
    assert _parse(b'{"model":"m","prompt":[1,2,3]}', "completion").tokens == [1, 2, 3]
    assert _parse(b'{"model":"m","prompt":["x y"]}', "completion").max_tokens == 16
    with pytest.raises(ApiError) as caught:
        _parse(b'{"model":"m","prompt":"x","max_tokens":100}', "completion")
    assert caught.value.code == "context_length_exceeded"
    with pytest.raises(ApiError) as caught:
        _parse(b'{"model":"m","prompt":{"x":1}}', "completion")
    assert caught.value.status == 400


def test_output_text_counts_exactly_and_is_seeded() -> None:
    text = OutputText(seed=3)
    tok = BuiltinTokenizer()
    for offset in (0, 17, OutputText.SIZE - 2):  # the last one wraps around the table
        words = text.slice(offset, 0, 5)
        joined = b"".join(words).decode()
        assert not joined.startswith(" ")
        assert tok.count(joined) == 5
        assert joined == text.text(offset, 5)
        assert b"".join(text.slice(offset, 0, 2) + text.slice(offset, 2, 5)) == b"".join(words)
    assert OutputText(seed=3).words == text.words
    assert text.draw(10, 10, exact=False, seed=None)[0] == 10
    assert text.draw(10, 0, exact=True, seed=None)[0] == 10
    assert text.draw(10, 0, exact=False, seed=5) == text.draw(10, 0, exact=False, seed=5)
    assert all(3 <= text.draw(10, 3, exact=False, seed=None)[0] <= 10 for _ in range(200))


def test_the_chat_template_adds_9_tokens_a_prompt_and_10_a_turn_in_usage_and_tokenize() -> None:
    def conversation(turns: int) -> dict:
        messages = [{"role": "user", "content": "a b c"}]
        for _ in range(turns - 1):
            messages += [{"role": "assistant", "content": "d e"}, {"role": "user", "content": "f"}]
        return {"model": "m", "messages": messages}

    one, three = conversation(1), conversation(3)
    assert len(chat_tokens(one)) == 3  # (off by default: the contents only)
    assert len(chat_tokens(one, template=True)) == 3 + TEMPLATE_PROMPT_TOKENS == 12
    assert len(chat_tokens(three, template=True)) == 9 + 9 + 2 * TEMPLATE_TURN_TOKENS
    assert len(chat_tokens(one, template=True, generation_prompt=False)) == 3 + 6
    # the usage (builtin words) and /tokenize (ids) count the same; no text makes a special id
    tokenizer = BuiltinTokenizer()
    ids = chat_tokens(three, tokenizer.encode, template=True)
    assert len(ids) == len(
        parse_generation("chat", json.dumps(three).encode(), "m", 1, 100, template=True).tokens
    )
    assert ids[0] == SPECIAL_BASE
    assert max(tokenizer.encode("a b c d e f")) < SPECIAL_BASE


def test_the_rendered_chat_template_tokenizes_as_the_usage_counts_it() -> None:
    """llama.cpp mode's /apply-template text, read back by its /tokenize (special tokens'
    texts parsed), is the usage's tokens to the id, with either tokenizer: 9 a prompt, 10 a
    turn; without the parsing the template's texts are words."""
    body = {
        "messages": [
            {"role": "user", "content": "baba bebe ok"},
            {"role": "assistant", "content": "dodo"},
            {"role": "user", "content": "kiki lulu"},
        ]
    }
    text = chat_text(body)
    assert text == (
        "<s><|im_start|><|user|><nl>baba bebe ok<|im_end|><nl>"
        "<|im_start|><|assistant|><nl>dodo<|im_end|><nl>"
        "<|im_start|><|user|><nl>kiki lulu<|im_end|><nl><|im_start|><|assistant|><nl>"
    )
    for tokenizer in (BuiltinTokenizer(), subword_tokenizer()):
        ids = special_tokens(text, tokenizer.encode)
        assert ids == chat_tokens(body, tokenizer.encode, template=True)
        contents = sum(len(tokenizer.encode(m["content"])) for m in body["messages"])
        assert len(ids) == contents + TEMPLATE_PROMPT_TOKENS + TEMPLATE_TURN_TOKENS
    assert special_tokens("ba <|im_end|>", BuiltinTokenizer().encode)[1] == SPECIAL_BASE + 2
    assert max(BuiltinTokenizer().encode(text)) < SPECIAL_BASE
