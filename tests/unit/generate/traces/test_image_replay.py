"""A recorded image channel replays as itself: trace.jsonl's ``images`` (each request's own
message's, ``[width, height, seed]``) become the replayed nodes' images; a request log's own
images (``[width, height]``, each picture made its own from its line) too; bad values are exit
2 at their line; a completions client cannot send them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.generate.traces.helpers import trace_scenario, write_csv, write_jsonl
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.generate.traces import TraceFileError, open_trace

TOK = BuiltinTokenizer()


def _line(session: int, node: int, images: Any = None, **extra: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "session_id": session,
        "node_id": node,
        "parents": [] if node == 0 else [node - 1],
        "history_parent": None if node == 0 else node - 1,
        "wait_after_ready": 0.0,
        "target_prompt_tokens": 5,
        "requested_output_tokens": 3,
        **extra,
    }
    if images is not None:
        line["images"] = images
    return line


def test_each_node_gets_its_recorded_images(tmp_path: Path) -> None:
    rows = [
        _line(0, 0, [[64, 32, 7], [28, 28, 0]]),
        _line(0, 1),
        _line(0, 2, [[100, 200, 9]]),
        _line(1, 0),
    ]
    path = write_jsonl(tmp_path / "trace.jsonl", rows)
    trace = open_trace(trace_scenario(path, "timed_synthetic_session"))
    sessions = trace.sessions(0, TOK)
    first, second = sessions.session(0), sessions.session(1)
    assert [node.images for node in first.nodes] == [
        ((64, 32, 7), (28, 28, 0)),
        (),
        ((100, 200, 9),),
    ]
    assert first.images
    assert not second.images
    assert second.nodes[0].images == ()


@pytest.mark.parametrize(
    "images",
    [[[0, 5, 1]], [[5]], [[5, 5, -1]], [[5, True, 1]], "big", [[20000, 5, 1]], [[5, 5, 1, 1]]],
)
def test_a_bad_images_value_is_refused_at_its_line(tmp_path: Path, images: Any) -> None:
    rows = [_line(0, 0), _line(0, 1, images)]
    path = write_jsonl(tmp_path / "trace.jsonl", rows)
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(path, "timed_synthetic_session"))
    assert caught.value.line == 2
    assert "images must be a list of [width, height] or [width, height, seed]" in str(caught.value)


def test_a_completions_client_cannot_replay_images(tmp_path: Path) -> None:
    rows = [_line(0, 0), _line(1, 0, [[5, 5, 1]])]
    path = write_jsonl(tmp_path / "trace.jsonl", rows)
    scenario = trace_scenario(
        path, "timed_synthetic_session", client={"type": "openai_completions"}
    )
    with pytest.raises(TraceFileError) as caught:
        open_trace(scenario)
    assert caught.value.line == 2
    assert "client is an openai_completions client" in str(caught.value)


def test_a_request_logs_images_are_sent_each_its_own_picture(tmp_path: Path) -> None:
    """A log's ``images`` of ``[width, height]``: the sizes as given, each image's seed made
    from its row's line and its place in the row, so no two images of the file are alike;
    a CSV cell holds the list's JSON text, an empty cell none."""
    rows = ['12,5,"[[640, 480], [640, 480]]"', "8,3,", '20,4,"[[1024, 768]]"']
    path = write_csv(tmp_path / "log.csv", "input_length,output_length,images", rows)
    trace = open_trace(trace_scenario(path, "request_log"))
    sessions = trace.sessions(0, TOK)
    nodes = [sessions.session(i).nodes[0] for i in range(3)]
    assert [node.prompt_tokens for node in nodes] == [12, 8, 20]
    sizes = [[(w, h) for w, h, _ in node.images] for node in nodes]
    assert sizes == [[(640, 480), (640, 480)], [], [(1024, 768)]]
    seeds = [seed for node in nodes for _, _, seed in node.images]
    assert len(set(seeds)) == 3
    assert [sessions.session(i).images for i in range(3)] == [True, False, True]
    again = open_trace(trace_scenario(path, "request_log")).sessions(0, TOK)
    assert [again.session(i).nodes[0].images for i in range(3)] == [n.images for n in nodes]


def test_a_request_log_without_images_is_staged_as_before(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "log.jsonl", [{"input_length": 5, "output_length": 2}] * 3)
    trace = open_trace(trace_scenario(path, "request_log"))
    assert trace.prepared.images_line is None
    sessions = trace.sessions(0, TOK)
    assert not any(sessions.session(i).images for i in range(3))
