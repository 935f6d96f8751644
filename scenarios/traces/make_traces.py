"""Write the small example traces shipped beside the scenarios (deterministic; no download).

    python scenarios/traces/make_traces.py

* ``request_log.csv`` (``flavor: request_log``): 240 rows over ~60 s of a chat service: one-turn
  requests and multi-turn chats (``session_id``), with arrival times and lengths drawn from
  heavy-tailed distributions like production logs;
* ``agent_sessions.jsonl`` (``flavor: timed_synthetic_session``): 24 agent sessions, each a
  planner, 2-4 parallel tool calls with think times, and a final answer that waits for all.

A test (``tests/unit/generate/traces/test_shipped.py``) checks the shipped files are this
script's output.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def request_log(seed: int = 14) -> str:
    rng = random.Random(seed)
    rows: list[tuple[float, str, int, int]] = []
    t = 0.0
    chats = 0
    while len(rows) < 240:
        t += rng.expovariate(4.0)
        if rng.random() < 0.3:  # a chat: 2-5 turns, a user's think time apart
            chats += 1
            turn_t = t
            for _ in range(rng.randint(2, 5)):
                rows.append((turn_t, f"chat-{chats}", _length(rng, 180), _length(rng, 90)))
                turn_t += rng.uniform(2.0, 8.0)
        else:
            rows.append((t, f"req-{len(rows)}", _length(rng, 400), _length(rng, 120)))
    rows = sorted(rows[:240])
    lines = ["timestamp,session_id,input_length,output_length"]
    lines += [f"{ts:.3f},{sid},{inp},{out}" for ts, sid, inp, out in rows]
    return "\n".join(lines) + "\n"


def agent_sessions(seed: int = 14) -> str:
    rng = random.Random(seed)
    out = []
    t = 0.0
    for session in range(24):
        t += rng.expovariate(0.5)
        tools = rng.randint(2, 4)
        nodes = [(0, [], None, 0.0, _length(rng, 600), _length(rng, 60))]
        for k in range(tools):
            nodes.append((1 + k, [0], 0, round(rng.uniform(0.05, 0.5), 3), _length(rng, 80), 40))
        nodes.append(
            (tools + 1, list(range(1, tools + 1)), 1, 0.0, _length(rng, 60), _length(rng, 200))
        )
        for node, parents, history, wait, new, output in nodes:
            row = {
                "session_id": f"agent-{session}",
                "timestamp": round(t, 3),
                "new_input_length": new,
                "output_length": output,
                "session_context": {
                    "node_id": node,
                    "parent_nodes": parents,
                    "history_parent": history,
                    "wait_after_ready": wait,
                },
            }
            out.append(json.dumps(row, separators=(",", ":")))
    return "\n".join(out) + "\n"


def _length(rng: random.Random, mean: float) -> int:
    return max(1, min(8 * int(mean), int(rng.lognormvariate(0, 0.8) * mean)))


FILES = {"request_log.csv": request_log, "agent_sessions.jsonl": agent_sessions}


def main() -> None:
    for name, make in FILES.items():
        (HERE / name).write_text(make())


if __name__ == "__main__":
    main()
