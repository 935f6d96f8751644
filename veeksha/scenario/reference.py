"""The generated key tables of docs/scenario.md, rendered from the JSON Schema.

The tables sit between two marker comments in docs/scenario.md; :func:`update_docs` rewrites only
that part, and a test fails when it is stale. Regenerate with
``python -m veeksha.scenario.schema`` (which also rewrites schemas/scenario.schema.json).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from veeksha.scenario.models import Scenario
from veeksha.scenario.schema import reachable_models, scenario_schema

__all__ = ["BEGIN_MARKER", "DOCS_PATH", "END_MARKER", "render_tables", "update_docs"]

DOCS_PATH = Path("docs") / "scenario.md"
BEGIN_MARKER = "<!-- BEGIN GENERATED TABLES (python -m veeksha.scenario.schema) -->"
END_MARKER = "<!-- END GENERATED TABLES -->"


def _anchor(name: str) -> str:
    return name.lower()


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        name = _ref_name(prop["$ref"])
        tag = defs.get(name, {}).get("properties", {}).get("type", {}).get("const")
        return f"[{f'`{tag}`' if tag else name}](#{_anchor(name)})"
    for key in ("oneOf", "anyOf"):
        if key in prop:
            return " or ".join(_type(branch, defs) for branch in prop[key])
    if "const" in prop:
        return f"`{prop['const']}`"
    if "enum" in prop:
        return " or ".join(f"`{value}`" for value in prop["enum"])
    kind = prop.get("type", "any")
    if kind == "array":
        text = f"list of {_type(prop.get('items', {}), defs)}"
        if "minItems" in prop:
            text += f" (at least {prop['minItems']})"
        return text
    names = {"integer": "int", "number": "number", "string": "string", "boolean": "bool"}
    text = names.get(kind, "mapping" if kind == "object" else str(kind))
    bounds = [
        (symbol, prop[key])
        for key, symbol in (
            ("minimum", "≥"),
            ("exclusiveMinimum", ">"),
            ("maximum", "≤"),
            ("exclusiveMaximum", "<"),
        )
        if key in prop
    ]
    return text + "".join(f" {symbol} {value}" for symbol, value in bounds)


def _default(prop: dict[str, Any], required: bool) -> str:
    if required:
        return "**required**"
    if "default" not in prop:
        return ""
    value = prop["default"]
    if isinstance(value, dict) and "type" in value:
        return f"`{value['type']}` with its defaults"
    if isinstance(value, dict):
        return "its defaults" if value else "`{}`"
    text = json.dumps(value, ensure_ascii=False)
    if isinstance(value, list) and len(text) > 30:
        return "see the section"
    return f"`{text}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(name: str, model: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    lines = [f"### {name}", ""]
    if model.get("description"):
        lines += [model["description"], ""]
    properties: dict[str, Any] = model.get("properties", {})
    if not properties:
        return [*lines, "No keys.", ""]
    required = set(model.get("required", []))
    lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, prop in properties.items():
        meaning = prop.get("description", "")
        if key == "type" and "const" in prop:
            meaning = meaning or "Selects this kind."
        default = "" if key == "type" else _default(prop, key in required)
        cells = [f"`{key}`", _type(prop, defs), default, meaning]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return [*lines, ""]


def render_tables() -> str:
    """Markdown: one table per section of the scenario language, top level first."""
    schema = scenario_schema()
    defs: dict[str, Any] = schema.get("$defs", {})
    lines = _table("Scenario", schema, defs)
    for model in reachable_models(Scenario)[1:]:
        if model.__name__ in defs:
            lines += _table(model.__name__, defs[model.__name__], defs)
    return "\n".join(lines).rstrip() + "\n"


def updated_docs(text: str) -> str:
    """``text`` with the part between the markers replaced by fresh tables."""
    head, begin, rest = text.partition(BEGIN_MARKER)
    _, end, tail = rest.partition(END_MARKER)
    if not begin or not end:
        raise ValueError(f"the markers {BEGIN_MARKER!r} / {END_MARKER!r} are missing")
    return f"{head}{BEGIN_MARKER}\n\n{render_tables()}\n{END_MARKER}{tail}"


def update_docs(path: str | Path = DOCS_PATH) -> Path:
    """Rewrite the generated tables of the docs file in place; return its path."""
    target = Path(path)
    target.write_text(updated_docs(target.read_text(encoding="utf-8")), encoding="utf-8")
    return target
