"""The report's per-client, per-agent and per-round tables (summary.json's ``clients``,
``agents`` and ``rounds``: ``veeksha.evaluate.groups``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

__all__ = ["render_groups"]


def _ms(stats: dict[str, Any] | None, key: str) -> str:
    value = None if stats is None else stats.get(key)
    return "-" if value is None else f"{value * 1000:.4g}"


def _count(value: Any) -> str:
    """A count of the summary (failed requests), "-" when it is not there (an older summary)."""
    return "-" if value is None else str(value)


def _table(title: str, headers: Sequence[str], rows: list[list[str]], left: int) -> Table:
    """A table whose numbers are never cut: each number column is at least as wide as its
    widest cell (a header of two words takes two lines); the first ``left`` columns (names) are
    left-aligned and fold a long name over lines rather than cutting it."""
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,  # (one space between columns, not two: 11 fit in 80)
        pad_edge=False,
    )
    for i, name in enumerate(headers):
        widest = max((len(row[i]) for row in rows), default=1)
        header = name.replace(" ", "\n")
        if i < left:
            table.add_column(header, justify="left", overflow="fold", min_width=min(widest, 12))
        else:
            table.add_column(header, justify="right", overflow="fold", min_width=widest)
    for row in rows:
        table.add_row(*row)
    return table


def render_groups(console: Console, summary: dict[str, Any]) -> None:
    """Print the tables of the sections present (nothing for a one-client run)."""
    clients = summary.get("clients")
    if clients:
        rows = []
        for name, c in clients.items():
            rate = c.get("output_tokens_per_s")
            use = c.get("cap_utilisation")
            rows.append(
                [
                    name,
                    str(c["ok"]),
                    _count(c.get("failed")),
                    "-" if rate is None else f"{rate:.4g}",
                    _ms(c["ttfc_s"], "p50"),
                    _ms(c["e2e_s"], "p50"),
                    _ms(c["e2e_s"], "p99"),
                    _ms(c["queue_wait_s"], "p50"),
                    _ms(c["queue_wait_s"], "p99"),
                    "-" if c.get("max_in_flight") is None else str(c["max_in_flight"]),
                    "-" if use is None else f"{use:.0%}",
                ]
            )
        headers: Sequence[str] = (
            "client", "ok", "failed", "tok/s", "ttfc p50", "e2e p50", "e2e p99", "queue p50",
            "queue p99", "cap", "use",
        )  # fmt: skip
        console.print(_table("clients (ms)", headers, rows, left=1))
    agents = summary.get("agents")
    if agents:
        rows = []
        for name, a in agents.items():
            e2e = a.get("e2e_s") or a.get("call_s")
            rows.append(
                [
                    name,
                    a["kind"],
                    str(a["turns"]),
                    str(a.get("reprompts", "-")),
                    _count(a.get("failed")),
                    _ms(a.get("ttfc_s"), "p50"),
                    _ms(e2e, "p50"),
                    _ms(e2e, "p99"),
                ]
            )
        headers = (
            "agent", "kind", "turns", "re-prompts", "failed", "ttfc p50", "e2e p50", "e2e p99"
        )  # fmt: skip
        console.print(_table("agents (ms)", headers, rows, left=2))
    rounds = summary.get("rounds")
    if rounds:
        table = Table(title="rounds (ms)", title_justify="left", box=box.SIMPLE_HEAD)
        for name in ("round", "requests", "ttfc p50", "e2e p50", "e2e p99"):
            table.add_column(name, justify="right")
        for r, entry in rounds.items():
            table.add_row(
                r,
                str(entry["requests"]),
                _ms(entry["ttfc_s"], "p50"),
                _ms(entry["e2e_s"], "p50"),
                _ms(entry["e2e_s"], "p99"),
            )
        console.print(table)
