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
import types
from collections.abc import Callable
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

_M = TypeVar("_M", bound=BaseModel)

KeyPath = tuple[str | int, ...]

#: The longest time a key of the run's clock may give, seconds: 10**9 (31.7 years). The run
#: keeps its times as int64 nanoseconds (±292 years from t0); a longer one overflowed them (a
#: crash, or a hang when the thread computing a deadline died of it). Gaps drawn from an
#: interval generator are clipped there (``veeksha.generate.distributions``).
MAX_SECONDS = 1_000_000_000

#: A number of seconds of the run's clock: at most :data:`MAX_SECONDS`.
Seconds = Annotated[float, Field(le=MAX_SECONDS)]


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


class Boolean:
    """A ``true``/``false`` given where a number is expected, as :class:`NumbersModel` hands it
    to pydantic: no int or float validator accepts it, so it is reported at its key like any
    other value of the wrong type (``seed: must be a valid integer, not a boolean (got true)``),
    every such mistake at once with the others."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "true" if self.value else "false"


def boolean_note(given: Any, kind: str) -> str:
    """The words a loader adds to pydantic's message of error ``kind`` for the value ``given``
    when it is a :class:`Boolean` that a number validator refused (``", not a boolean"``), else
    nothing: how the scenario's and the microbenchmarks' loaders say it alike."""
    return ", not a boolean" if isinstance(given, Boolean) and kind in _NUMBER_ERRORS else ""


_NUMBER_ERRORS = ("int_type", "float_type")


class NumbersModel(BaseModel):
    """Refuses ``true``/``false`` where a number is expected, in every field of every model
    deriving from it (the scenario's models, the simulator's and the managed server's).

    Python's bool is an int, so pydantic takes ``seed: true`` as seed 1 and ``arrival_rate:
    true`` as 1.0: a typo or a misplaced key that would run silently. One rule, read from the
    annotations: a field whose type is int or float (alone, or in a union with null or with
    words such as ``'auto'``), or a list or a mapping of them, refuses a boolean there, unless
    the type also takes bool. Anything else is left to pydantic as before (``2.0`` for an int
    is 2, ``2.5`` an error, ``"3"`` is 3). A loader words the error with :func:`boolean_note`.
    The models of the microbenchmarks' settings (``veeksha.experiment.microbench.config``)
    derive from it too.

    NaN and the infinities (``.nan``, ``.inf``) are refused in every number field too
    (``must be a finite number``): no key means anything by them, and a comparison with NaN is
    false whatever the bound, so ``benchmark_timeout: .nan`` passed every check and ran
    unbounded, and ``duration: .inf`` crashed the run when made nanoseconds.
    """

    model_config = ConfigDict(allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        shapes = _number_keys(cls)
        out = None
        for key, value in data.items():
            shape = shapes.get(key)
            new: Any = value
            if shape == "value" and isinstance(value, bool):
                new = Boolean(value)
            elif shape == "items" and isinstance(value, list):
                new = [Boolean(v) if isinstance(v, bool) else v for v in value]
            elif shape == "values" and isinstance(value, dict):
                new = {k: Boolean(v) if isinstance(v, bool) else v for k, v in value.items()}
            if new is not value and new != value:  # (a Boolean equals nothing)
                out = dict(data) if out is None else out
                out[key] = new
        return data if out is None else out


def _strip(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _members(annotation: Any) -> list[Any]:
    annotation = _strip(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        return [_strip(a) for a in get_args(annotation)]
    return [annotation]


def _takes_numbers(annotation: Any) -> bool:
    """Whether a value of this type may be an int or a float but not a bool."""
    members = _members(annotation)
    return bool not in members and (int in members or float in members)


@functools.cache
def _number_keys(model: type[BaseModel]) -> dict[str, str]:
    """Each key (field name or alias) of a model whose value is a number (``value``), a list of
    numbers (``items``) or a mapping to numbers (``values``), by :func:`_takes_numbers`."""
    out: dict[str, str] = {}
    for name, info in model.model_fields.items():
        members = _members(info.annotation)
        items = [get_args(m) for m in members if get_origin(m) is list]
        values = [get_args(m) for m in members if get_origin(m) is dict]
        if _takes_numbers(info.annotation):
            shape = "value"
        elif items and items[0] and _takes_numbers(items[0][0]):
            shape = "items"
        elif values and len(values[0]) == 2 and _takes_numbers(values[0][1]):
            shape = "values"
        else:
            continue
        alias = info.validation_alias
        names = [name, *(alias.choices if isinstance(alias, AliasChoices) else [alias])]
        out.update({n: shape for n in names if isinstance(n, str)})
    return out


class StrictModel(NumbersModel):
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
