"""The report's per-client, per-agent and per-round tables (summary.json's ``clients``,
``agents`` and ``rounds``: ``veeksha.evaluate.groups``)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

__all__ = ["render_groups"]


def _ms(stats: dict[str, Any] | None, key: str) -> str:
    value = None if stats is None else stats.get(key)
    return "-" if value is None else f"{value * 1000:.4g}"


def render_groups(console: Console, summary: dict[str, Any]) -> None:
    """Print the tables of the sections present (nothing for a one-client run)."""
    clients = summary.get("clients")
    if clients:
        table = Table(title="clients (ms)", title_justify="left", box=box.SIMPLE_HEAD)
        for name in ("client", "ok", "tok/s", "ttfc p50", "e2e p50", "e2e p99"):
            table.add_column(name, justify="left" if name == "client" else "right")
        for name in ("queue p50", "queue p99", "cap", "use"):
            table.add_column(name, justify="right")
        for name, c in clients.items():
            rate = c.get("output_tokens_per_s")
            use = c.get("cap_utilisation")
            table.add_row(
                name,
                str(c["ok"]),
                "-" if rate is None else f"{rate:.4g}",
                _ms(c["ttfc_s"], "p50"),
                _ms(c["e2e_s"], "p50"),
                _ms(c["e2e_s"], "p99"),
                _ms(c["queue_wait_s"], "p50"),
                _ms(c["queue_wait_s"], "p99"),
                "-" if c.get("max_in_flight") is None else str(c["max_in_flight"]),
                "-" if use is None else f"{use:.0%}",
            )
        console.print(table)
    agents = summary.get("agents")
    if agents:
        table = Table(title="agents (ms)", title_justify="left", box=box.SIMPLE_HEAD)
        for name in ("agent", "kind", "turns", "re-prompts", "ttfc p50", "e2e p50", "e2e p99"):
            table.add_column(name, justify="left" if name in ("agent", "kind") else "right")
        for name, a in agents.items():
            e2e = a.get("e2e_s") or a.get("call_s")
            table.add_row(
                name,
                a["kind"],
                str(a["turns"]),
                str(a.get("reprompts", "-")),
                _ms(a.get("ttfc_s"), "p50"),
                _ms(e2e, "p50"),
                _ms(e2e, "p99"),
            )
        console.print(table)
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
