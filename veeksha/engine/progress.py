"""The live status line: elapsed time, sessions, requests by state, dispatch lag.

On a terminal it is one line redrawn in place (rich); otherwise (CI, pipes) a plain line every
``interval_s``. Nothing is printed with ``quiet``. It reads counters the loop already keeps, so
it costs nothing per request.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from veeksha.engine.pools import format_pools

if TYPE_CHECKING:  # (rich is loaded only where a terminal shows the line)
    from rich.live import Live

__all__ = ["ProgressLine", "Snapshot", "load_display"]

Snapshot = Callable[[], dict[str, float | int]]
_LIVE_REFRESH_S = 0.25


def format_status(values: dict[str, float | int]) -> str:
    """One status line from the loop's counters."""
    return (
        f"{values['elapsed']:7.1f}s  sessions {values['sessions_started']} started"
        f" / {values['sessions_done']} done  requests pending {values['pending']}"
        f" ready {values['ready']} in flight {values['in_flight']} done {values['done']}"
        f" failed {values['failed']} cancelled {values['cancelled']}"
        f"  lag {values['lag_ms']:.2f} ms" + format_pools(values)
    )


def load_display(quiet: bool) -> None:
    """Import the terminal display (rich) now, unless ``quiet``: call it during the set-up, so
    ``ProgressLine.start`` never imports it in the lead before t0 (tens of ms on a busy
    machine would make the first arrivals late)."""
    if not quiet:
        import rich.console
        import rich.live
        import rich.text  # noqa: F401  (loaded for later)


class ProgressLine:
    """Periodic status output while a run goes: terminal, plain lines, and the run log."""

    def __init__(
        self,
        snapshot: Snapshot,
        quiet: bool,
        interval_s: float = 5.0,
        periodic: Callable[[], str] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._quiet = quiet
        self._interval_s = interval_s
        self._periodic = periodic
        self._log = log
        self._live: Live | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._quiet and self._log is None:
            return
        if not self._quiet:
            from rich.console import Console

            console = Console(stderr=True)
            if console.is_terminal:
                from rich.live import Live
                from rich.text import Text

                self._live = Live(Text(""), console=console, auto_refresh=False)
                self._live.start()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        tick = _LIVE_REFRESH_S if self._live is not None else self._interval_s
        next_report = loop.time() + self._interval_s
        while True:
            await asyncio.sleep(tick)
            status = format_status(self._snapshot())
            if self._live is not None:
                self._live.update(_text(status), refresh=True)
            if loop.time() < next_report:
                continue
            next_report += self._interval_s
            lines = [status] if self._live is None else []
            if self._periodic is not None:
                lines.append(self._periodic())
            for line in lines:
                self._emit(line)
            if self._log is not None:
                self._log(status)
                if self._periodic is not None:
                    self._log(lines[-1])

    def _emit(self, line: str) -> None:
        if self._quiet:
            return
        if self._live is not None:
            self._live.console.print(line, highlight=False)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._live is not None:
            self._live.update(_text(format_status(self._snapshot())), refresh=True)
            self._live.stop()
            self._live = None


def _text(line: str) -> Any:
    from rich.text import Text  # (loaded by ``start`` already, with the live line)

    return Text(line)
