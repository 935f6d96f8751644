"""A module of veeksha as another revision has it, loaded beside this checkout's (no heavy
imports here: the merge benchmark's child measures its own RSS)."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def module_at(revision: str, path: str, folder: Path) -> ModuleType:
    """The file ``path`` (e.g. ``veeksha/record/trace.py``) at ``revision``, written into
    ``folder`` and imported under a name of its own (its imports are this checkout's)."""
    source = subprocess.run(
        ["git", "show", f"{revision}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    name = f"{Path(path).stem}_at_revision"
    target = folder / f"{name}.py"
    target.write_text(source)
    spec = importlib.util.spec_from_file_location(name, target)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
