"""JSON output of the evaluation files: numpy scalars made plain, non-finite numbers made null."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["jsonable", "write_json"]


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars/arrays as Python values, tuples as lists, NaN/inf as None."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON (written whole, then renamed into place)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(jsonable(data), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
