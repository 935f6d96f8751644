"""JSON Schema (draft 2020-12) of the scenario language, for editors and third-party validators.

Generated from the models, then completed where pydantic's export says less than the models
accept:

* a ``"$schema"`` declaration (editors otherwise assume draft-07);
* defaults of sections built by a factory (so hovering a key shows what leaving it out means);
* every alias spelling as a property (``theta`` and ``alpha`` on zipf), never both at once;
* ``oneOf`` on ``type`` where leaving ``type`` out selects the section's default type, every other
  branch requiring its ``type`` (so an unknown ``type:`` value is flagged on its line).

Regenerate the committed copy with ``veeksha schema`` (or ``python -m veeksha.scenario.schema``,
which also refreshes the generated tables of docs/scenario.md).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from veeksha.scenario._walk import aliases_of, classify
from veeksha.scenario.models import Scenario, _default_tags

__all__ = [
    "SCHEMA_DIALECT",
    "SCHEMA_PATH",
    "reachable_models",
    "scenario_schema",
    "schema_text",
    "write_schema",
]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_PATH = Path("schemas") / "scenario.schema.json"


def reachable_models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """Every model a scenario can contain, depth first from ``root`` in declaration order."""
    seen: list[type[BaseModel]] = []
    stack: list[Any] = [root]
    while stack:
        node = classify(stack.pop())
        if node.kind == "model" and node.model is not None and node.model not in seen:
            seen.append(node.model)
            stack += reversed([info.annotation for info in node.model.model_fields.values()])
        elif node.kind == "tagged":
            stack += reversed(node.members.values())
        elif node.kind in ("list", "dict"):
            stack.append(node.item().annotation)
        elif node.kind == "union":
            stack += reversed(node.alternatives)
    return seen


def _complete_model(model: type[BaseModel], schema: dict[str, Any]) -> None:
    properties: dict[str, Any] = schema.get("properties", {})
    for name, info in model.model_fields.items():
        prop = properties.get(name)
        if prop is None:
            continue
        if info.default_factory is not None and "default" not in prop:
            prop["default"] = to_jsonable_python(info.default_factory())  # type: ignore[call-arg]
    for alias, name in aliases_of(model).items():
        if name in properties and alias not in properties:
            prop = copy.deepcopy(properties[name])
            prop["title"] = alias.replace("_", " ").title()
            prop["description"] = f"Another spelling of `{name}`. " + prop.get("description", "")
            properties[alias] = prop
            schema.setdefault("dependentSchemas", {})[alias] = {"not": {"required": [name]}}
    tags = _default_tags(model)
    if model is Scenario:  # items of clients: without type, a chat-completions client
        tags = {**tags, "clients": "openai_chat_completions"}
    for name, tag in tags.items():
        prop = properties.get(name, {})
        for option in [prop, *prop.get("anyOf", [])]:
            union = option.get("items", option)
            mapping = union.get("discriminator", {}).get("mapping", {})
            for branch in union.get("oneOf", []):
                if branch.get("$ref") != mapping.get(tag):
                    branch["required"] = ["type"]


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`Scenario`, as a dict."""
    schema = Scenario.model_json_schema(mode="validation")
    defs: dict[str, Any] = schema.get("$defs", {})
    for model in reachable_models(Scenario):
        target = schema if model is Scenario else defs.get(model.__name__)
        if target is not None:
            _complete_model(model, target)
    schema["title"] = "veeksha scenario"
    return {"$schema": SCHEMA_DIALECT, **schema}


def schema_text() -> str:
    """The schema as the committed file holds it (stable key order, trailing newline)."""
    return json.dumps(scenario_schema(), indent=2, ensure_ascii=False) + "\n"


def write_schema(path: str | Path = SCHEMA_PATH) -> Path:
    """Write the schema to ``path`` (parents created); return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(schema_text(), encoding="utf-8")
    return target


if __name__ == "__main__":
    from veeksha.scenario.reference import update_docs

    write_schema()
    update_docs()
