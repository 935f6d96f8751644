"""The flavor interface: what a trace flavor turns the rows of a file into.

A flavor knows one row shape (its :class:`~veeksha.generate.traces.reader.Field` list) and turns
each batch of file rows into **staged rows** (:meth:`TraceFlavor.stage`, vectorised, one Arrow
batch in, one out), then, if its rows are grouped into sessions, each session's rows into a DAG
(:meth:`TraceFlavor.link`). Everything else (reading, grouping, caching, unservable rows, session
blocks, wrap, arrival times) is shared, in ``prepare.py`` and ``sessions.py``.

Staged columns (``STAGED``): ``line`` (int64, the file line), ``group`` (string, null when the row
is a session of its own), ``ts`` (float64 seconds or null), ``prompt_tokens`` and
``output_tokens`` (int64, validated ≥ 0). A flavor may add columns of its own for ``link``.

Content columns (optional, ``CONTENT``): a flavor that carries prompt text or token-block hashes
adds them to its staged rows (``content.py`` builds the prompts from them): ``text`` (string: the
request's own text), ``system`` (string: a system message before a root's text), ``reply``
(string: the dataset's answer, whose token count is the output length) and ``hash_ids``
(list<int64>: token blocks of ``block_size`` tokens, before ``text``).

Routing columns (optional, ``ROUTING``): ``client`` (string: the name of the scenario's client
that serves the request; null or empty: the first, unless ``client_selection`` chooses it as the
cache is made, ``prepare.py``) and ``priority`` (int64: the node's priority for
``runtime.priority: node``, null: 0). A client name the scenario does not have is exit 2 at the
first row naming it (``open_trace``).

Node columns (optional, ``NODE``): ``tool_latency`` (float64: the row is a tool node, no request,
which takes this many seconds and whose result is the row's ``text``, or a placeholder of
``prompt_tokens`` tokens; null: an LLM request), ``reprompts`` (int32: the recorded re-prompts
of the node, replayed as that many failed validations; null: 0), ``valid`` (bool: whether the
node's last recorded attempt passed its validation, replayed as recorded; null: not recorded),
``agent`` (string: the speaking agent of an ``agent_rounds`` node), ``round`` (int32: its round),
``transcript`` (list<int32>: node indices within the session, all smaller than the row's
own, whose turns the node's messages merge; null: the history parent's conversation instead),
``images`` (list<int64>: the images of the row's own message, flat ``width, height, seed``) and
``abandon_after`` (float64: seconds after its request is sent that its user abandons it, as
recorded; null: never).

Linked columns (``LINKED``), per row of a session in topological order: ``parents``
(list<int32>, node indices within the session, all smaller than the row's own), ``history``
(int32, one of the parents, or null), ``wait`` (float64, think time after the last parent).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import numpy as np
import pyarrow as pa

from veeksha.generate.images import MAX_SIDE
from veeksha.generate.traces.arrow import mask as arrow_mask
from veeksha.generate.traces.arrow import numbers
from veeksha.generate.traces.reader import ELEMENT, LINE, Field, TraceFileError

__all__ = [
    "CONTENT",
    "LINKED",
    "NODE",
    "ROUTING",
    "SHOWN_LINES",
    "STAGED",
    "TraceFlavor",
    "check_lengths",
    "first_bad",
]

#: lines shown per reason a row is not replayed (run.log, summary.json)
SHOWN_LINES = 10

STAGED = pa.schema(
    [
        ("line", pa.int64()),
        ("group", pa.string()),
        ("ts", pa.float64()),
        ("prompt_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
    ]
)
CONTENT = pa.schema(
    [
        ("text", pa.string()),
        ("system", pa.string()),
        ("reply", pa.string()),
        ("hash_ids", pa.list_(pa.int64())),
    ]
)
ROUTING = pa.schema([("client", pa.string()), ("priority", pa.int64())])
NODE = pa.schema(
    [
        ("tool_latency", pa.float64()),
        ("reprompts", pa.int32()),
        ("valid", pa.bool_()),
        ("agent", pa.string()),
        ("round", pa.int32()),
        ("transcript", pa.list_(pa.int32())),
        ("images", pa.list_(pa.int64())),  # the image channel's, flat: width, height, seed, ...
        ("abandon_after", pa.float64()),
    ]
)
LINKED = pa.schema(
    [
        ("parents", pa.list_(pa.int32())),
        ("history", pa.int32()),
        ("wait", pa.float64()),
    ]
)


class TraceFlavor(ABC):
    """One trace row shape. Subclasses set ``name`` and ``fields`` and implement ``stage``;
    grouped flavors override ``link`` (the default: each row is a session of one request,
    grouped rows a linear chat in file order)."""

    name: ClassVar[str]
    fields: ClassVar[Sequence[Field]]
    #: columns ``stage`` adds for ``link`` beyond ``STAGED``
    extra: ClassVar[Sequence[tuple[str, pa.DataType]]] = ()
    #: the reason reported for rows with a 0 prompt or output length (summary.json)
    unservable_reason: ClassVar[str] = "zero_length"
    #: whether ``stage`` adds warm-up sessions before the rows (``warmup_sessions``)
    warms_up: ClassVar[bool] = False

    def __init__(self, path: Path, settings: object = None) -> None:
        self.path = path
        self.settings = settings
        #: tokens of one ``hash_ids`` block (content flavors with hash ids)
        self.block_size = 0
        #: sessions at the start of the trace that warm the server up (not measured)
        self.warmup_sessions = 0
        #: the clients ``client_selection`` spreads the rows over (set before the first
        #: ``stage``; None: one client): a flavor with warm-ups warms each of them
        self.warmup_clients: list[str] | None = None
        #: what run.log should say about the trace beyond its counts (e.g. rows left out)
        self.notes: list[str] = []
        #: rows of the file this flavor does not replay, by reason (summary.json, run.log),
        #: the first ``SHOWN_LINES`` lines of each reason's rows, and what the reason means
        #: here (run.log's warning; absent: the reason's general wording)
        self.dropped: dict[str, int] = {}
        self.dropped_lines: dict[str, list[int]] = {}
        self.dropped_why: dict[str, str] = {}
        #: chosen by ``flavor: {type: auto}`` from the file's names (said in run.log)
        self.detected = False
        #: a JSON array's rows read so far: each row's line and element (``note_rows``), so
        #: an error at a line names its element as the reader's own errors do
        self._row_lines: list[np.ndarray] = []
        self._row_elements: list[np.ndarray] = []

    @abstractmethod
    def stage(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Validate a batch of file rows (``fields`` + ``__line``) into staged rows; raise
        :class:`TraceFileError` naming the first bad row's line."""

    def link(self, session: pa.Table) -> pa.Table:
        """One grouped session's staged rows (file order) → the same rows in topological order
        with the ``LINKED`` columns. Default: a linear chat in file order, with history."""
        n = session.num_rows
        parents = pa.array([[]] + [[i - 1] for i in range(1, n)], pa.list_(pa.int32()))
        history = pa.array([None, *range(n - 1)], pa.int32())
        wait = pa.array(np.zeros(n), pa.float64())
        return _with_links(session, parents, history, wait)

    # ------------------------------------------------------------------------------ helpers

    def note_lines(self, reason: str, lines: Sequence[int]) -> None:
        """Keep the first ``SHOWN_LINES`` lines of the rows not replayed for ``reason`` (the
        count is ``dropped[reason]``; a line is shown once, though a JSON array's line may
        hold several rows)."""
        shown = self.dropped_lines.setdefault(reason, [])
        for line in lines:
            if len(shown) >= SHOWN_LINES:
                break
            if not shown or shown[-1] != line:
                shown.append(int(line))

    def note_rows(self, batch: pa.RecordBatch) -> None:
        """Remember the lines and elements of a batch of file rows (a JSON array's; other
        files have no elements: nothing is kept)."""
        if ELEMENT in batch.schema.names:
            self._row_lines.append(numbers(batch.column(LINE), np.int64))
            self._row_elements.append(numbers(batch.column(ELEMENT), np.int64))

    def images(self, value: Any, line: int) -> list[int] | None:
        """A row's ``images`` (the image channel's, or a log's own), flat ``width, height,
        seed, ...``; None for none. Each is ``[width, height]`` (its seed then made from the
        row's line and its place in the row: every image of the file its own) or ``[width,
        height, seed]`` (veeksha's own trace.jsonl)."""
        if isinstance(value, str):  # (a CSV cell: the list's JSON text)
            with contextlib.suppress(msgspec.DecodeError):
                value = msgspec.json.decode(value)
        fix = (
            f"images must be a list of [width, height] or [width, height, seed]: whole numbers,"
            f" width and height 1 to {MAX_SIDE}, seed 0 or more (got {str(value)[:60]})"
        )
        if not isinstance(value, list):
            raise self.error(line, fix)
        flat: list[int] = []
        for k, image in enumerate(value):
            if (
                not isinstance(image, list)
                or len(image) not in (2, 3)
                or any(isinstance(v, bool) or not isinstance(v, int) for v in image)
                or not (1 <= image[0] <= MAX_SIDE and 1 <= image[1] <= MAX_SIDE)
                or (len(image) == 3 and not 0 <= image[2] < 1 << 63)
            ):
                raise self.error(line, fix)
            flat += image if len(image) == 3 else [*image, line << 16 | k]
        return flat or None

    def error(self, line: int | None, message: str) -> TraceFileError:
        """The error of the row at ``line``; in a JSON array it names the row's element too
        (``array element [i]``), or the elements starting on that line when it holds several
        (``prepare`` then finds which, by staging them one by one)."""
        if line is None or not self._row_lines:
            return TraceFileError(self.path, line, message)
        if len(self._row_lines) > 1:
            self._row_lines = [np.concatenate(self._row_lines)]
            self._row_elements = [np.concatenate(self._row_elements)]
        lines = self._row_lines[0]  # (in file order: elements start on nondecreasing lines)
        lo, hi = np.searchsorted(lines, [line, line + 1])
        if hi <= lo:
            return TraceFileError(self.path, line, message)
        first = int(self._row_elements[0][lo])
        return TraceFileError(self.path, line, message, element=first, elements=int(hi - lo))


def _with_links(table: pa.Table, parents: pa.Array, history: pa.Array, wait: pa.Array) -> pa.Table:
    return (
        table.append_column("parents", parents)
        .append_column("history", history)
        .append_column("wait", wait)
    )


def first_bad(mask: pa.Array | np.ndarray) -> int | None:
    """Index of the first true value of ``mask`` (nulls count as false), or None."""
    values = mask if isinstance(mask, np.ndarray) else arrow_mask(mask)
    hits = np.flatnonzero(values)
    return int(hits[0]) if hits.size else None


def check_lengths(flavor: TraceFlavor, batch: pa.RecordBatch, names: Sequence[str]) -> None:
    """Raise for the first negative value of the named integer columns of ``batch``."""
    for name in names:
        column = batch.column(name)
        values = numbers(column, np.int64)
        if values.size and values.min() < 0:
            bad = int(np.flatnonzero(values < 0)[0])
            line = batch.column(LINE)[bad].as_py()
            raise flavor.error(
                line,
                f"{name} = {int(values[bad])} is negative; token counts must be 0 or more",
            )
