"""Images for a vision-language model, end to end: a real ``veeksha run`` of chats whose first
turn carries images against the built-in simulator (which counts an image as its 28-pixel
patches, ``simulator.image_patch_px``). The server counts every root's prompt as its text and
its images exactly, each later turn as its history (the images again) plus its own text, and
serves the re-sent images from its prefix cache; the rows, trace.jsonl and the health checks
say so; the recorded trace replays as itself, images included."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.scenario.loader import load_scenario_text

PATCH = 28

SCENARIO = """
seed: 21
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.05}}
session_generator:
  session_graph:
    type: linear
    num_request_generator: {type: fixed, value: 3}
    request_wait_generator: {type: fixed, interval: 0.01}
    inherit_history: true
  channels:
    - {type: text, body_length_generator: {type: uniform, min: 5, max: 30}}
    - type: image
      count_generator: {type: uniform, min: 1, max: 2}
      width_generator: {type: uniform, min: 20, max: 300}
      height_generator: {type: fixed_stair, values: [56, 90]}
  output_spec: {text: {output_length_generator: {type: uniform, min: 3, max: 8}}}
runtime: {max_sessions: 8, benchmark_timeout: 60, num_workers: 1}
trace_recorder: {enabled: true, include_content: true}
"""

REPLAY = """
seed: 21
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.05}}
session_generator:
  type: trace
  trace_file: TRACE
  flavor: {type: timed_synthetic_session}
  wrap_mode: false
runtime: {max_sessions: 8, benchmark_timeout: 60, num_workers: 1}
trace_recorder: {enabled: true, include_content: true}
"""


def _tokens(images: list[list[int]]) -> int:
    return sum(math.ceil(w / PATCH) * math.ceil(h / PATCH) for w, h, _ in images)


def _run(text: str, run_dir: Path) -> tuple[pd.DataFrame, dict[tuple[int, int], list[list[int]]]]:
    outcome = run_as_the_command(
        load_scenario_text(text, "s.yaml"), run_dir, quiet=True, plots=False
    )
    assert not outcome.interrupted
    requests = pd.read_parquet(run_dir / "requests.parquet")
    lines = [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines()]
    images = {(line["session_id"], line["node_id"]): line.get("images", []) for line in lines}
    return requests.set_index(["session_id", "node_id"]).sort_index(), images


def test_the_server_counts_each_turns_images_and_caches_the_resent_ones(tmp_path: Path) -> None:
    rows, images = _run(SCENARIO, tmp_path / "run")
    assert (rows.status == "ok").all()
    assert len(rows) == 8 * 3
    for (session, node), row in rows.iterrows():
        own = images[(session, node)]
        if node == 0:
            assert 1 <= len(own) <= 2
            assert {h for _, h, _ in own} <= {56, 90}
            assert row.images == len(own)
            assert row.image_pixels == sum(w * h for w, h, _ in own)
            # the server's count: the text and the images' patches, exactly
            assert row.prompt_tokens_total == row.target_prompt_tokens + _tokens(own)
            continue
        assert own == []
        assert pd.isna(row.images)
        parent = rows.loc[(session, node - 1)]
        # the history again (its images included), the parent's answer, the new text
        expected = parent.prompt_tokens_total + parent.output_tokens + row.target_prompt_tokens
        assert row.prompt_tokens_total == expected
        # the images come first in the conversation: re-sent, they are served from the cache
        root_images = _tokens(images[(session, 0)])
        assert row.cached_tokens >= root_images // 16 * 16
    # (the run's other checks are about the machine's timing, which a loaded CI may fail)
    health = json.loads((tmp_path / "run" / "health.json").read_text())
    check = {c["name"]: c for c in health["checks"]}["prompt_length"]
    assert check["status"] == "PASS", check
    assert check["statistics"]["image_requests"] == 8
    assert check["statistics"]["server"]["turns"] == 16  # (later turns are still compared)
    assert "8 requests with images not held to the server's count" in check["detail"]
    counts = json.loads((tmp_path / "run" / "summary.json").read_text())["requests"]
    assert counts["with_images"] == 8
    assert counts["images"] == sum(len(own) for own in images.values())

    # the recorded trace replays as itself: the same images, so the same server counts
    replay = REPLAY.replace("TRACE", str(tmp_path / "run" / "trace.jsonl"))
    again, replayed = _run(replay, tmp_path / "replay")
    assert replayed == images
    assert (again.status == "ok").all()
    assert again.prompt_tokens_total.tolist() == rows.prompt_tokens_total.tolist()
    assert again.images.fillna(0).tolist() == rows.images.fillna(0).tolist()
