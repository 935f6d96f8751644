"""The package's floors (docs/architecture.md "Floors"): a module imports only from floors below
its own (or from its own package). An arrow that runs up is a design error this test names."""

from __future__ import annotations

import ast
from pathlib import Path

import veeksha

#: Floor of each top-level module or package of ``veeksha``, lowest first.
FLOORS: dict[str, int] = {
    "__init__": 0,
    "errors": 0,
    "bytecode": 0,
    "clock": 0,
    "forked": 0,
    "isolated": 0,
    "redact": 0,
    "terminal": 0,
    "plural": 0,
    "open_files": 0,
    "net": 1,
    "timers": 1,
    "scenario": 2,
    "generate": 3,
    "schedule": 4,
    "dispatch": 4,
    "simulator": 4,
    "record": 5,
    "server": 6,
    "evaluate": 7,
    "engine": 8,
    "experiment": 9,
    "distributed": 9,
    "cli": 10,
}

ROOT = Path(veeksha.__file__).parent


def _unit(module: str) -> str:
    """The top-level unit of a dotted ``veeksha.x.y`` name (``__init__`` for ``veeksha``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, unit) of every ``veeksha`` import in a file, wherever it is (lazy ones too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "veeksha":
                found += [(node.lineno, alias.name) for alias in node.names]
            elif node.module.startswith("veeksha."):
                found.append((node.lineno, _unit(node.module)))
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, _unit(alias.name))
                for alias in node.names
                if alias.name.startswith("veeksha.")
            ]
    return found


def _sources() -> list[Path]:
    # process entry points (python -m veeksha.x) may start from the command line's helpers
    return sorted(p for p in ROOT.rglob("*.py") if p.name != "__main__.py")


def test_every_unit_has_a_floor() -> None:
    units = {p.relative_to(ROOT).parts[0].removesuffix(".py") for p in _sources()}
    assert units - {"py.typed"} <= set(FLOORS), sorted(units - set(FLOORS))


def test_no_import_runs_up_a_floor() -> None:
    upward: list[str] = []
    for path in _sources():
        own = path.relative_to(ROOT).parts[0].removesuffix(".py")
        for line, unit in _imports(path):
            if unit == own or unit not in FLOORS:  # names imported from veeksha/__init__
                continue
            if FLOORS[unit] >= FLOORS[own]:
                upward.append(f"{path.relative_to(ROOT.parent)}:{line}: {own} imports {unit}")
    assert not upward, "\n".join(upward)


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    source = tmp_path / "bad.py"
    source.write_text("def f():\n    from veeksha.engine.run import run_scenario\n")
    assert _imports(source) == [(2, "engine")]
