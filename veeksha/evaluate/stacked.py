"""A wide table printed at the terminal's width: its value columns stacked into several tables,
each repeating the key column, rather than squeezed until names and numbers break.

``print_stacked`` fits as many value columns after the key column as the console's width holds
(rich's measure of the table without wrapping), in their order, then starts another table with
the key column again. A value never wraps; only the key column may fold, and only when a single
value column beside it does not fit. E.g. a sweep of 4 points with 9 columns at 80 columns
prints two tables: point + status, health, SLOs, exit, req/s; then point + the four latencies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

__all__ = ["StackedColumn", "print_stacked"]


@dataclass(frozen=True)
class StackedColumn:
    """One column of a stacked table: its header and its cells, one per row."""

    header: str
    cells: Sequence[str]
    justify: Literal["left", "right"] = "right"


def _table(key: StackedColumn, columns: Sequence[StackedColumn]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column(key.header, justify=key.justify, overflow="fold")
    for column in columns:
        table.add_column(column.header, justify=column.justify, no_wrap=True)
    for row, key_cell in enumerate(key.cells):
        table.add_row(key_cell, *(column.cells[row] for column in columns))
    return table


def _fits(console: Console, table: Table) -> bool:
    unbounded = console.options.update(max_width=1 << 20)  # (measure clamps to the width)
    return Measurement.get(console, unbounded, table).maximum <= console.width


def print_stacked(
    console: Console, title: str, key: StackedColumn, columns: Sequence[StackedColumn]
) -> None:
    """Print ``columns`` beside ``key`` in as few tables as ``console``'s width allows (see the
    module docstring), each under the line ``title`` (after the first: ``title (continued)``)."""
    groups: list[list[StackedColumn]] = []
    group: list[StackedColumn] = []
    for column in columns:
        if group and not _fits(console, _table(key, [*group, column])):
            groups.append(group)
            group = []
        group.append(column)
    groups.append(group)
    for index, shown in enumerate(groups):
        # (the title on a line of its own: as a table's title it would fold to the table's width)
        console.print(
            title if index == 0 else f"{title} (continued)", markup=False, highlight=False
        )
        console.print(_table(key, shown))
