"""What keeps the scenario models cheap to build (veeksha.scenario.base's docstring): eager
annotations and default factories whose signature pydantic reads without work."""

import ast
import inspect
import types
from pathlib import Path

import pytest
from pydantic import BaseModel

import veeksha.scenario.models as models_module
from veeksha.scenario.models import Scenario
from veeksha.scenario.schema import reachable_models

MODEL_MODULES = (
    "base",
    "generators",
    "schedulers",
    "graphs",
    "session_generators",
    "clients",
    "runtime",
    "evaluators",
    "server",
    "simulator",
    "models",
)
PACKAGE = Path(models_module.__file__).parent


@pytest.mark.parametrize("name", MODEL_MODULES)
def test_model_modules_evaluate_annotations_eagerly(name: str) -> None:
    tree = ast.parse((PACKAGE / f"{name}.py").read_text(encoding="utf-8"))
    future = [
        alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == "__future__"
        for alias in node.names
    ]
    assert "annotations" not in future, (
        f"veeksha/scenario/{name}.py: string annotations make pydantic compile and evaluate each "
        "one while it builds the models; see veeksha.scenario.base"
    )


def test_default_factories_are_plain_functions() -> None:
    checked = 0
    for model in reachable_models(Scenario):  # (every model, the servers' too)
        for name, info in model.model_fields.items():
            made = info.default_factory
            if made is None:
                continue
            checked += 1
            where = f"{model.__name__}.{name}"
            assert isinstance(made, types.FunctionType), (
                f"{where}: default_factory {made!r} is not a plain function; use "
                "factory(Model), empty_list or empty_dict (veeksha.scenario.base)"
            )
            assert not inspect.signature(made).parameters, where
            made_value = made()  # type: ignore[call-arg]
            for item in made_value if isinstance(made_value, list) else [made_value]:
                if isinstance(item, BaseModel):
                    assert type(item).model_config.get("defer_build") is not True, (
                        f"{where}: {type(item).__name__} is made on its own by a default "
                        "factory: give it defer_build=False (veeksha.scenario.base)"
                    )
    assert checked >= 40
