"""Trace files for the tests, written from rows (CSV or JSON lines)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from veeksha.scenario.models import Scenario


def write_csv(path: Path, header: str, rows: Sequence[str]) -> Path:
    path.write_text(header + "\n" + "".join(row + "\n" for row in rows))
    return path


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(msgspec.json.encode(row) + b"\n" for row in rows))
    return path


def trace_scenario(path: Path, flavor: str = "request_log", **extra: Any) -> Scenario:
    generator = {"type": "trace", "trace_file": str(path), "flavor": {"type": flavor}}
    generator |= extra.pop("generator", {})
    return Scenario.model_validate({"session_generator": generator, **extra})
