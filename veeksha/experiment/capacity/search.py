"""The capacity search algorithm: a geometric probe, then a bisection, on a grid of values.

Vocabulary:

- the *knob* is the one scenario value the search varies (an arrival rate, a concurrency);
- a *probe* measures one knob value and returns its *verdict*: ``pass`` (every SLO proven met),
  ``fail`` (an SLO proven broken), ``undecided`` (the data could not tell, even after the extra
  requests the probe spent) or ``unhealthy`` (the load generator, not the server, was the limit:
  not a server result);
- the *grid*: values are rounded to ``precision`` decimal places (the public veeksha meaning of
  ``precision``; a concurrency is an integer whatever ``precision`` says), one grid *step* apart;
- the *ceiling* is the lowest value that did not pass: a ``fail``, or an ``undecided`` or
  ``unhealthy`` value above which the search does not look.

Phase 1 probes ``start_value``, then multiplies by ``expansion_factor`` (at least one step up,
at most ``max_value``) while probes pass. Phase 2 bisects between the highest pass and the
ceiling until they are one step apart. ``max_iterations`` bounds the probes of both phases.
The answer, ``best``, is the highest value that passed; when ``converged`` the capacity lies in
[best, best + step). Only a ``pass`` moves the search up: a value that could not be judged is
never taken as capacity.

Worked example (integer grid, capacity 3): probe 1 pass, 2 pass, 4 fail (ceiling), then bisect
(2, 4): 3 pass → best 3, ceiling 4, converged after 4 probes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "FAIL",
    "PASS",
    "UNDECIDED",
    "UNHEALTHY",
    "SearchOutcome",
    "SearchSettings",
    "SearchStep",
    "Verdict",
    "search_capacity",
    "summarise",
]

Verdict = Literal["pass", "fail", "undecided", "unhealthy"]
PASS: Verdict = "pass"
FAIL: Verdict = "fail"
UNDECIDED: Verdict = "undecided"
UNHEALTHY: Verdict = "unhealthy"


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """The public veeksha search keys, checked by the capacity configuration."""

    start_value: float
    max_value: float
    expansion_factor: float = 2.0
    max_iterations: int = 20
    precision: int = 2
    integer: bool = False  # a concurrency: the grid is the integers ≥ 1

    @property
    def scale(self) -> int:
        """Grid points per unit of the knob."""
        return 1 if self.integer else 10**self.precision

    @property
    def step(self) -> float:
        """The grid's spacing: the search's resolution."""
        return 1.0 / self.scale

    def units(self, value: float) -> int:
        """``value`` on the grid, in steps (at least one step)."""
        return max(1, round(value * self.scale))

    def value(self, units: int) -> float:
        return float(units) if self.integer else units / self.scale


@dataclass(frozen=True, slots=True)
class SearchStep:
    """One probe of the search: the value, the phase that chose it and its verdict."""

    value: float
    phase: Literal["probe", "bisect"]
    verdict: Verdict


@dataclass
class SearchOutcome:
    """The search's answer: ``best`` (None when nothing passed), the ceiling above it, and how
    the search ended (``converged``: best and ceiling one step apart; ``reached_max``: even
    ``max_value`` passed; otherwise ``max_iterations`` ran out first)."""

    best: float | None = None
    ceiling: float | None = None
    ceiling_verdict: Verdict | None = None
    converged: bool = False
    reached_max: bool = False
    steps: list[SearchStep] = field(default_factory=list)

    @property
    def iterations(self) -> int:
        return len(self.steps)


def search_capacity(
    settings: SearchSettings,
    probe: Callable[[float], Verdict],
    observe: Callable[[SearchStep], None] | None = None,
) -> SearchOutcome:
    """Search the highest passing value of ``probe`` (see the module docstring); ``observe``
    sees each step as it is taken."""
    outcome = SearchOutcome()
    top = settings.units(settings.max_value)
    current = min(settings.units(settings.start_value), top)
    best: int | None = None
    ceiling: int | None = None

    def run(units: int, phase: Literal["probe", "bisect"]) -> Verdict:
        verdict = probe(settings.value(units))
        step = SearchStep(settings.value(units), phase, verdict)
        outcome.steps.append(step)
        if observe is not None:
            observe(step)
        return verdict

    while outcome.iterations < settings.max_iterations:
        verdict = run(current, "probe")
        if verdict != PASS:
            ceiling, outcome.ceiling_verdict = current, verdict
            break
        best = current
        if current >= top:
            outcome.reached_max = True
            break
        grown = settings.units(settings.value(current) * settings.expansion_factor)
        current = min(max(grown, current + 1), top)

    if best is not None and ceiling is not None:
        while ceiling - best > 1 and outcome.iterations < settings.max_iterations:
            middle = (best + ceiling) // 2
            verdict = run(middle, "bisect")
            if verdict == PASS:
                best = middle
            else:
                ceiling, outcome.ceiling_verdict = middle, verdict

    outcome.best = None if best is None else settings.value(best)
    outcome.ceiling = None if ceiling is None else settings.value(ceiling)
    outcome.converged = best is not None and ceiling is not None and ceiling - best <= 1
    return outcome


def summarise(settings: SearchSettings, steps: list[SearchStep]) -> SearchOutcome:
    """The outcome the steps taken so far support, for a search that stopped before it ended
    (interrupted): ``best`` the highest value that passed, ``ceiling`` the lowest that did not
    (the search only ever probes a value between the two, so every value that did not pass is
    above every value that did), ``converged`` when they are one step apart."""
    outcome = SearchOutcome(steps=list(steps))
    passed = [settings.units(s.value) for s in steps if s.verdict == PASS]
    others = [s for s in steps if s.verdict != PASS]
    best = max(passed, default=None)
    if others:
        lowest = min(others, key=lambda s: s.value)
        outcome.ceiling, outcome.ceiling_verdict = lowest.value, lowest.verdict
    outcome.best = None if best is None else settings.value(best)
    outcome.reached_max = best is not None and best >= settings.units(settings.max_value)
    outcome.converged = (
        best is not None
        and outcome.ceiling is not None
        and settings.units(outcome.ceiling) - best <= 1
    )
    return outcome
