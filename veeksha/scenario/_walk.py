"""Walk the scenario models along a key path.

The loader needs to know, for a key path such as ``traffic_scheduler.interval_generator``, which
model (and so which keys) applies there: to suggest a key for a typo, to turn pydantic's error
locations (which contain union tags) back into the user's key path, and to type ``--set`` values.
This module answers those questions from the models' annotations, without a registry.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AliasChoices, BaseModel, SecretStr
from pydantic.fields import FieldInfo

__all__ = ["Node", "PathPart", "aliases_of", "allowed_keys", "classify", "field_for_key", "tag_of"]

PathPart = str | int


@dataclass(frozen=True)
class Node:
    """What the models expect at one place of a scenario.

    ``kind`` is ``model`` (a mapping of known keys), ``tagged`` (a mapping whose ``type`` picks one
    of ``members``), ``list``, ``dict`` (free-form mapping), ``union`` (a plain union of scalars
    or lists) or ``leaf`` (a scalar).
    """

    kind: Literal["model", "tagged", "list", "dict", "union", "leaf"]
    annotation: Any
    model: type[BaseModel] | None = None
    members: dict[str, type[BaseModel]] = field(default_factory=dict)
    alternatives: tuple[Any, ...] = ()

    def item(self) -> Node:
        """The node of the items of a list or of the values of a free-form mapping."""
        args = get_args(self.annotation)
        if self.kind == "list" and args:
            return classify(args[0])
        if self.kind == "dict" and len(args) == 2:
            return classify(args[1])
        return Node("leaf", Any)

    def with_data(self, data: Any) -> Node:
        """Resolve a tagged union to the member the data's ``type`` selects (if it names one)."""
        if self.kind == "tagged" and isinstance(data, dict):
            member = self.members.get(data.get("type"))  # type: ignore[arg-type]
            if member is not None:
                return classify(member)
        return self

    def accepts_str(self) -> bool:
        """Whether a plain string is a valid value here (str or secret fields)."""
        candidates = self.alternatives if self.kind == "union" else (self.annotation,)
        return any(_strip(c) in (str, SecretStr) for c in candidates)


def _strip(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def tag_of(model: type[BaseModel]) -> str | None:
    """The ``Literal`` tag of a model's ``type`` field, if it has one."""
    info = model.model_fields.get("type")
    if info is None:
        return None
    args = get_args(info.annotation)
    if get_origin(info.annotation) is Literal and len(args) == 1 and isinstance(args[0], str):
        return args[0]
    return None


def classify(annotation: Any) -> Node:
    """The :class:`Node` of an annotation."""
    annotation = _strip(annotation)
    origin = get_origin(annotation)
    if _is_model(annotation):
        return Node("model", annotation, model=annotation)
    if origin in (Union, types.UnionType):
        alternatives = tuple(_strip(a) for a in get_args(annotation) if a is not type(None))
        if len(alternatives) == 1:
            return classify(alternatives[0])
        if all(_is_model(a) and tag_of(a) for a in alternatives):
            members = {tag_of(a) or "": a for a in alternatives}
            return Node("tagged", annotation, members=members)
        return Node("union", annotation, alternatives=alternatives)
    if origin is list:
        return Node("list", annotation)
    if origin is dict:
        return Node("dict", annotation)
    return Node("leaf", annotation)


def _names(name: str, info: FieldInfo) -> list[str]:
    names = [name]
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        names += [c for c in alias.choices if isinstance(c, str) and c != name]
    elif isinstance(alias, str) and alias != name:
        names.append(alias)
    return names


def field_for_key(model: type[BaseModel], key: object) -> tuple[str, FieldInfo] | None:
    """The field a key of a mapping sets (by name or alias), if any."""
    if not isinstance(key, str):
        return None
    for name, info in model.model_fields.items():
        if key in _names(name, info):
            return name, info
    return None


def allowed_keys(model: type[BaseModel]) -> list[str]:
    """Every key a mapping of this model accepts, aliases included, in declaration order."""
    keys: list[str] = []
    for name, info in model.model_fields.items():
        keys += _names(name, info)
    return keys


def aliases_of(model: type[BaseModel]) -> dict[str, str]:
    """Alias → field name, for the fields of a model that accept another spelling."""
    out: dict[str, str] = {}
    for name, info in model.model_fields.items():
        for alias in _names(name, info)[1:]:
            out[alias] = name
    return out
