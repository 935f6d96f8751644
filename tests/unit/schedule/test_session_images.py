"""A conversation's images: each request sends its own message's images and, after a history
parent, the ones its history holds, at the index of the message that carries them."""

from __future__ import annotations

import json

from veeksha.dispatch.openai import RequestBuilder
from veeksha.generate.images import data_url
from veeksha.generate.spec import NodeSpec, SessionSpec
from veeksha.schedule.session_state import SessionState

A, B, C = (10, 20, 1), (30, 40, 2), (50, 60, 3)


def _node(i: int, history: int | None, images: tuple[tuple[int, int, int], ...] = ()) -> NodeSpec:
    parents = () if history is None else (history,)
    return NodeSpec(i, parents, history, 0.0, f"p{i}", 1, 4, images=images)


def _sent(state: SessionState, node_id: int) -> tuple[list[tuple[str, str]], list]:
    messages, _ = state.outgoing(node_id)
    return messages, state.outgoing_images(node_id, messages)


def test_a_chat_resends_its_first_turns_images_with_its_history() -> None:
    spec = SessionSpec(1, [_node(0, None, (A, B)), _node(1, 0), _node(2, 1, (C,))], images=True)
    s = SessionState(spec, started_at_ns=0, cancel_on_failure=True)
    s.start()
    assert _sent(s, 0) == ([("user", "p0")], [(0, *A), (0, *B)])
    s.complete(0, 1, True, answer="a0", conversation_tokens=1, answer_tokens=1)
    messages, images = _sent(s, 1)
    assert messages == [("user", "p0"), ("assistant", "a0"), ("user", "p1")]
    assert images == [(0, *A), (0, *B)]
    s.complete(1, 2, True, answer="a1", conversation_tokens=3, answer_tokens=1)
    messages, images = _sent(s, 2)
    assert len(messages) == 5
    assert images == [(0, *A), (0, *B), (4, *C)]  # (its own, in its own message)


def test_a_system_message_and_a_reprompt_keep_the_images_on_the_users_message() -> None:
    root = _node(0, None, (A,))
    root.system = "be brief"
    spec = SessionSpec(2, [root, _node(1, 0)], images=True)
    s = SessionState(spec, started_at_ns=0, cancel_on_failure=True)
    s.start()
    assert _sent(s, 0)[1] == [(1, *A)]
    s.mark_dispatched(0)
    s.reprompt(0, "bad answer", "try again", 2, 5, conversation_tokens=2)
    messages, images = _sent(s, 0)
    assert [role for role, _ in messages] == ["system", "user", "assistant", "user"]
    assert images == [(1, *A)]  # (the note carries none)
    s.complete(0, 9, True, answer="good", conversation_tokens=2, answer_tokens=1)
    assert _sent(s, 1)[1] == [(1, *A)]


def test_the_body_puts_each_image_before_its_messages_text() -> None:
    builder = RequestBuilder(chat=True, model="m", stream=True, max_tokens_param="max_tokens")
    messages = [("user", "look"), ("assistant", "ok"), ("user", "and this")]
    sent = json.loads(builder.body(messages, 5, [(0, *A), (2, *B), (2, *C)]))
    image = {"type": "image_url", "image_url": {"url": data_url(*A)}}
    assert sent["messages"][0] == {
        "role": "user",
        "content": [image, {"type": "text", "text": "look"}],
    }
    assert sent["messages"][1] == {"role": "assistant", "content": "ok"}
    parts = sent["messages"][2]["content"]
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]
    assert [p["image_url"]["url"] for p in parts[:2]] == [data_url(*B), data_url(*C)]
    assert parts[2] == {"type": "text", "text": "and this"}
    assert json.loads(builder.body(messages, 5, [])) == json.loads(builder.body(messages, 5))
