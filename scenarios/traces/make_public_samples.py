"""Write the small sample traces of scenarios/traces/ in the public formats (nothing downloaded).

    python scenarios/traces/make_public_samples.py [FOLDER]

Each file has the exact header or keys of the published trace it imitates (docs/traces.md):
``mooncake_trace.jsonl`` (Mooncake, FAST'25), ``azure_llm.csv`` (Azure LLM inference trace),
``burstgpt.csv`` (BurstGPT, with two failed requests), ``sharegpt.json`` (ShareGPT-shaped
conversations), ``rag.csv`` and ``prompts.jsonl`` (your own prompts, as vLLM's custom
dataset). The numbers come from a fixed seed, so running it again gives the same bytes (a unit
test checks the shipped files against it).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SEED = 2025
ROWS = 40

_TEXT = (
    "the cache keeps every block a request computed so the next prompt that starts the same way"
    " skips its prefill and answers sooner while the scheduler batches the rest"
)
_WORDS = _TEXT.split(" ")


def _sentence(rng: np.random.Generator, low: int, high: int) -> str:
    return " ".join(_WORDS[i] for i in rng.integers(0, len(_WORDS), int(rng.integers(low, high))))


def mooncake(rng: np.random.Generator) -> str:
    """Four shared system prefixes (2-3 blocks of 512), each request adding its own blocks."""
    prefixes = [list(range(10 * p, 10 * p + 2 + p % 2)) for p in range(4)]
    next_id = 100
    t = 0
    lines = []
    for _ in range(ROWS):
        ids = list(prefixes[int(rng.integers(0, 4))])
        own = int(rng.integers(1, 4))
        ids += list(range(next_id, next_id + own))
        next_id += own
        length = 512 * (len(ids) - 1) + int(rng.integers(1, 513))
        row = {
            "timestamp": t,
            "input_length": length,
            "output_length": int(rng.integers(8, 64)),
            "hash_ids": ids,
        }
        lines.append(json.dumps(row))
        t += int(rng.exponential(250))
    return "\n".join(lines) + "\n"


def azure_llm(rng: np.random.Generator) -> str:
    start = datetime(2023, 11, 16, 18, 15, 46)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    at = start
    for _ in range(ROWS):
        stamp = at.strftime("%Y-%m-%d %H:%M:%S.%f") + "0"  # the trace's 7 fraction digits
        lines.append(f"{stamp},{int(rng.integers(50, 2000))},{int(rng.integers(5, 300))}")
        at += timedelta(microseconds=int(rng.exponential(200_000)))
    return "\n".join(lines) + "\n"


def burstgpt(rng: np.random.Generator) -> str:
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    t = 5.0
    for i in range(ROWS):
        request = int(rng.integers(20, 1500))
        response = 0 if i in (7, 23) else int(rng.integers(5, 400))  # failed requests
        model = "GPT-4" if rng.random() < 0.3 else "ChatGPT"
        kind = "API log" if rng.random() < 0.5 else "Conversation log"
        lines.append(f"{t:g},{model},{request},{response},{request + response},{kind}")
        t += round(float(rng.exponential(0.25)), 3)
    return "\n".join(lines) + "\n"


def sharegpt(rng: np.random.Generator) -> str:
    rows = []
    for i in range(12):
        messages = []
        if i % 4 == 0:
            messages.append({"from": "system", "value": "answer in one short paragraph"})
        for _ in range(int(rng.integers(1, 4))):
            messages.append({"from": "human", "value": _sentence(rng, 5, 40)})
            messages.append({"from": "gpt", "value": _sentence(rng, 5, 60)})
        rows.append({"id": f"conv{i}", "conversations": messages})
    return json.dumps(rows, indent=1) + "\n"


def rag(rng: np.random.Generator) -> str:
    lines = ["timestamp,doc_id,prompt_text,input_length,output_length"]
    sizes = {f"doc{d}": int(rng.integers(600, 1600)) for d in range(6)}
    t = 0.0
    for _ in range(ROWS):
        doc = f"doc{min(5, int(rng.exponential(1.5)))}"
        question = _sentence(rng, 4, 12)
        lines.append(f"{t:.3f},{doc},{question},{sizes[doc]},{int(rng.integers(8, 80))}")
        t += float(rng.exponential(0.3))
    return "\n".join(lines) + "\n"


def prompts(rng: np.random.Generator) -> str:
    rows = []
    for i in range(20):
        row: dict[str, object] = {"prompt": _sentence(rng, 5, 60)}
        if i % 3:  # (the others ask the flavor's default length)
            row["output_length"] = int(rng.integers(16, 200))
        if i % 5 == 0:
            row["system"] = "answer in one short paragraph"
        rows.append(row)
    return "".join(json.dumps(row) + "\n" for row in rows)


SAMPLES = {
    "mooncake_trace.jsonl": mooncake,
    "azure_llm.csv": azure_llm,
    "burstgpt.csv": burstgpt,
    "sharegpt.json": sharegpt,
    "rag.csv": rag,
    "prompts.jsonl": prompts,
}


def write_samples(folder: Path) -> list[Path]:
    """Write every sample into ``folder``; returns their paths."""
    paths = []
    for k, (name, make) in enumerate(SAMPLES.items()):
        path = folder / name
        path.write_text(make(np.random.default_rng([SEED, k])))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write_samples(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        sys.stdout.write(f"{written}\n")
