"""Checks that span sections of a scenario (a name defined in one place, used in another).

Each problem is a key path and a message; the loader turns the path into the file and line of
that key (``veeksha.scenario.loader``), so a node naming an unknown client is reported where it
is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veeksha.scenario.models import Scenario

__all__ = ["Problem", "scenario_problems"]

Problem = tuple[tuple[str | int, ...], str]


def scenario_problems(scenario: Scenario) -> list[Problem]:
    """Every cross-section mistake of ``scenario`` (empty: none)."""
    problems: list[Problem] = []
    if scenario.clients is not None and "client" in scenario.model_fields_set:
        problems.append(
            (
                ("clients",),
                "give either client: (one target) or clients: (several, each with a name), "
                "not both: move the client section into clients as an item with a name",
            )
        )
    names = [name for name, _ in scenario.client_entries()]
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            problems.append(
                (("clients", index, "name"), f"client name {name!r} is used twice: rename one")
            )
        seen.add(name)
    problems += _selection_problems(scenario, names)
    return problems


def unknown_client(name: str, names: list[str]) -> str:
    """The message for a reference to a client that does not exist."""
    return f"unknown client {name!r}; the clients are: {', '.join(repr(n) for n in names)}"


def _selection_problems(scenario: Scenario, names: list[str]) -> list[Problem]:
    from veeksha.scenario.models import SyntheticSessionGenerator, WeightedClients

    generator = scenario.session_generator
    if not isinstance(generator, SyntheticSessionGenerator):
        return []
    selection = generator.client_selection
    if not isinstance(selection, WeightedClients):
        return []
    path = ("session_generator", "client_selection", "weights")
    return [
        ((*path, name), unknown_client(name, names))
        for name in selection.weights
        if name not in names
    ]
