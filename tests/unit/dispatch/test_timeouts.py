"""A route's request timeouts on one loop timer (``worker._Timeouts``), on a fake loop clock."""

from __future__ import annotations

from typing import Any

from veeksha.dispatch.worker import _Timeouts


class FakeLoop:
    def __init__(self) -> None:
        self.now = 0.0
        self.handles: list[FakeHandle] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any) -> FakeHandle:
        handle = FakeHandle(when, callback)
        self.handles.append(handle)
        return handle

    def run_until(self, t: float, early: float = 0.0) -> None:
        """Fire every live handle due by ``t`` (each ``early`` before its time)."""
        while True:
            due = [h for h in self.handles if not h.cancelled and not h.ran and h.when <= t]
            if not due:
                break
            handle = min(due, key=lambda h: h.when)
            self.now = max(self.now, handle.when - early)
            handle.ran = True
            handle.callback()
        self.now = t


class FakeHandle:
    def __init__(self, when: float, callback: Any) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False
        self.ran = False

    def cancel(self) -> None:
        self.cancelled = True


class Request:
    def __init__(self, name: str, timeouts: _Timeouts, loop: FakeLoop, log: list[Any]) -> None:
        self.name, self.timeouts, self.loop, self.log = name, timeouts, loop, log

    def on_timeout(self) -> None:
        self.log.append((self.name, self.loop.now))
        self.timeouts.done(self)  # type: ignore[arg-type] # (as _Exchange.finish does)


def test_requests_time_out_at_their_own_deadlines_on_one_timer() -> None:
    loop, log = FakeLoop(), []
    timeouts = _Timeouts(10.0)
    requests = {}

    def start(name: str, at: float) -> None:
        loop.run_until(at)
        requests[name] = Request(name, timeouts, loop, log)
        timeouts.start(requests[name], loop)  # type: ignore[arg-type]

    for name, at in (("a", 0.0), ("b", 1.0), ("c", 2.5), ("d", 4.0)):
        start(name, at)
    assert len(loop.handles) == 1  # one timer for the four
    timeouts.done(requests["a"])  # answered: never times out
    timeouts.done(requests["c"])
    loop.run_until(20.0, early=0.0005)  # (a loop that fires a timer a little early)
    assert log == [("b", 10.9995), ("d", 13.9995)]  # at their deadlines, not a's or c's
    start("e", 30.0)
    loop.run_until(100.0)
    assert log[2] == ("e", 40.0)
    assert [h.when for h in loop.handles] == [10.0, 11.0, 14.0, 40.0]


def test_close_cancels_the_timer() -> None:
    loop, log = FakeLoop(), []
    timeouts = _Timeouts(1.0)
    timeouts.start(Request("a", timeouts, loop, log), loop)  # type: ignore[arg-type]
    timeouts.close()
    loop.run_until(5.0)
    assert log == []
    assert loop.handles[0].cancelled
