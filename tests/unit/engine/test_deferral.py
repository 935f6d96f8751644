"""Which WorkItems are handed over deferrable (engine.deferral), on the loop's fake clock."""

from __future__ import annotations

from collections.abc import Callable

from tests.unit.engine.test_loop import Harness, chain, fixed_gaps
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.engine.deferral import loop_defers
from veeksha.engine.loop import LoopSettings
from veeksha.generate.spec import SessionSpec
from veeksha.schedule.arrivals import ConcurrencyRamp
from veeksha.schedule.phases import PhaseBounds

S = 1_000_000_000


class Loop(Harness):
    """A traffic loop with a ``collect`` hook; keeps its items and counts the collects."""

    def __init__(self, settings: LoopSettings, make: Callable[[int], SessionSpec]) -> None:
        self.collects = 0
        super().__init__(settings, make, collect=self._collect)

    def _collect(self) -> None:
        self.collects += 1

    def run(self, until_ns: int = 10 * S) -> None:
        """Start, answer every item at once (ok), until nothing more comes."""
        self.loop.start(0)
        answered = 0
        while not self.loop.finished and self.clock.now <= until_ns:
            self.timers.advance(self.clock.now)
            fresh = self.items[answered:]
            answered = len(self.items)
            self.loop.on_results([_ok(item, self.clock.now) for item in fresh])
            if self.loop.finished or len(self.items) > answered:
                continue  # (what the results released is answered next)
            at = self.timers.next_time()
            if at is None:
                break
            self.clock.now = max(self.clock.now, at)


def _ok(item: WorkItem, at_ns: int) -> Result:
    return Result(item.request_id, 0, "ok", at_ns, at_ns, at_ns, output_text="a b")


def _open(**changes: object) -> LoopSettings:
    settings = LoopSettings(cancel_on_failure=True, max_sessions=4, rate_gaps=fixed_gaps(0.1))
    for key, value in changes.items():
        setattr(settings, key, value)
    return settings


def _flags(loop: Loop) -> list[bool]:
    return [item.deferrable for item in loop.items]


def test_single_request_sessions_of_an_open_loop_are_deferrable() -> None:
    loop = Loop(_open(), lambda i: chain(i, 1))
    loop.run()
    assert loop.loop.finished
    # (the last session's request is not: once the last session has started, nothing is, and
    # the run's end waits for no bulk read)
    assert _flags(loop) == [True, True, True, False]
    assert loop.collects >= 1  # (at the arrival timer's wake-ups)


def test_only_the_last_turn_of_a_chat_is_deferrable() -> None:
    loop = Loop(_open(max_sessions=2), lambda i: chain(i, 3))
    loop.run()
    assert len(loop.items) == 6
    by_turn = {(item.messages[-1][1]): item.deferrable for item in loop.items}
    assert by_turn == {
        "s0 t0": False,
        "s0 t1": False,
        "s0 t2": True,
        "s1 t0": False,
        "s1 t1": False,
        "s1 t2": False,  # (after the last session's start)
    }


def test_a_capped_client_is_never_deferred() -> None:
    def make(i: int) -> SessionSpec:
        spec = chain(i, 1)
        spec.nodes[0].client = i % 2
        return spec

    loop = Loop(_open(client_caps=[2, None]), make)
    loop.run()
    assert [(item.client, item.deferrable) for item in loop.items] == [
        (0, False),
        (1, True),
        (0, False),
        (1, False),  # (the last session's: see above)
    ]


def test_a_checked_answer_is_never_deferred() -> None:
    def make(i: int) -> SessionSpec:
        spec = chain(i, 1)
        spec.nodes[0].validation = lambda text: None
        return spec

    loop = Loop(_open(), make)
    loop.run()
    assert _flags(loop) == [False] * 4


def test_nothing_is_deferred_when_a_completion_drives_the_run() -> None:
    closed = _open(rate_gaps=None, concurrency=ConcurrencyRamp(2, 0.0))
    assert not loop_defers(closed)
    assert not loop_defers(_open(max_in_flight=3))
    assert not loop_defers(_open(phases=[PhaseBounds("a", None, 2, drain=True), PhaseBounds("b")]))
    assert loop_defers(_open(phases=[PhaseBounds("a", None, 2), PhaseBounds("b")]))
    assert loop_defers(_open(warmup_sessions=2))
    loop = Loop(closed, lambda i: chain(i, 1))
    loop.run()
    assert loop.items
    assert _flags(loop) == [False] * len(loop.items)


def test_without_a_collect_hook_nothing_is_deferrable() -> None:
    harness = Harness(_open(), lambda i: chain(i, 1))
    harness.loop.start(0)
    harness.timers.advance(S)
    assert harness.items
    assert not any(item.deferrable for item in harness.items)
