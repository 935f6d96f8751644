"""The base of every scenario model: strict keys, validated defaults, default ``type`` tags.

Default factories are plain functions (``factory(Runtime)``, :func:`empty_list`), never a class
or a builtin: pydantic reads every factory's signature when it builds a model, which for a model
class means generating the class' whole signature and for ``list``/``dict`` parsing their text
signature (tokenize): ~25 ms of the scenario package's import, for nothing.

The modules of models (this one, ``generators``, ``schedulers``, ``graphs``,
``session_generators``, ``clients``, ``runtime``, ``evaluators``, ``server``, ``simulator``,
``models``) evaluate their annotations when Python reads them: no ``from __future__ import
annotations``, which would make every field's annotation a string that pydantic compiles and
evaluates while it builds the class (~300 of them, ~20-35 ms). So a class names only classes
defined above it, and an after-validator returns ``Self``.

A model builds its own validator only when it is validated on its own: ``Scenario`` and the
models a default factory makes (``class Runtime(StrictModel, defer_build=False)``). Every other
model (``defer_build=True``, from ``StrictModel``) is validated inside ``Scenario``'s validator,
which inlines it; on its own it builds its validator on first use.
"""

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, model_validator

_M = TypeVar("_M", bound=BaseModel)

KeyPath = tuple[str | int, ...]


def _shown_path(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


class KeyProblem(ValueError):
    """A validator's complaint about keys below where pydantic reports it (the model of a model
    validator, the field of a field validator), so that it is reported at a key rather than at
    the section: ``keys`` (relative paths: ``"max_sessions"``, ``"client.model"``,
    ``("values", 2)``) are the keys it concerns, the first where it is reported. The loader
    names a ``--set`` override instead when one of them came from one
    (``veeksha.scenario.loader``). ``str()`` starts with the first key (pydantic's message)."""

    def __init__(self, message: str, *keys: str | KeyPath) -> None:
        if not keys:
            raise TypeError("KeyProblem needs at least one key")
        self.message = message
        self.keys: tuple[KeyPath, ...] = tuple(
            tuple(k.split(".")) if isinstance(k, str) else k for k in keys
        )
        super().__init__(f"{_shown_path(self.keys[0])}: {message}")


class StrictModel(BaseModel):
    """Base of every scenario model: unknown keys are errors, defaults are validated.

    A polymorphic section written without ``type:`` takes the type of its default (``client:
    {model: m}`` is a chat-completions client), as SCENARIO_REFERENCE.md gives every key a default.
    """

    model_config = ConfigDict(
        extra="forbid", validate_default=True, populate_by_name=True, defer_build=True
    )

    @model_validator(mode="before")
    @classmethod
    def _default_type_tags(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        tags = _default_tags(cls)
        if not any(key in data for key in tags):
            return data
        data = dict(data)
        for key, tag in tags.items():
            value = data.get(key)
            if isinstance(value, dict) and "type" not in value:
                data[key] = {"type": tag, **value}
            elif isinstance(value, list):
                data[key] = [
                    {"type": tag, **item} if isinstance(item, dict) and "type" not in item else item
                    for item in value
                ]
        return data


def factory(model: type[_M]) -> Callable[[], _M]:
    """``model()`` as a default factory (see the module docstring)."""

    def make() -> _M:
        return model()

    return make


def empty_list() -> list[Any]:
    """A new ``[]`` (a default factory; see the module docstring)."""
    return []


def empty_dict() -> dict[Any, Any]:
    """A new ``{}`` (a default factory; see the module docstring)."""
    return {}


@functools.cache
def _default_tags(model: type[BaseModel]) -> dict[str, str]:
    """Field name → the ``type`` tag of its default, for fields holding tagged models."""
    tags: dict[str, str] = {}
    for name, info in model.model_fields.items():
        if info.default_factory is None:
            continue
        default = info.default_factory()  # type: ignore[call-arg]
        first = default[0] if isinstance(default, list) and default else default
        tag = getattr(first, "type", None) if isinstance(first, BaseModel) else None
        if isinstance(tag, str):
            tags[name] = tag
    return tags
