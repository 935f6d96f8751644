"""Reading a trace file in batches: CSV, JSONL or a JSON array, with line numbers.

A flavor names the fields it reads (:class:`Field`: name, aliases, type); the reader returns
them as Arrow record batches of at most ``BATCH_ROWS`` rows, plus ``__line``, the line of the
file each row starts on, so every later error can say ``file:line``. Nothing else of the file is
kept: a 10-million-row CSV is never 10 million Python objects.

* **CSV** (``.csv``, ``.tsv``, or a file whose first byte is neither ``{`` nor ``[``): pyarrow's
  streaming CSV reader, typed columns, one header line. Rows are numbered from line 2 (``__line``:
  row k is line k + 2, which blank lines and quoted values over several lines shift); a line
  that is shown (an error's, a warning's) is found exactly by a second, Python-level scan, paid
  only then: the reader's own errors scan at once, ``prepare`` maps the others (``csv_lines``).
* **JSONL** (``.jsonl``, ``.ndjson``, or a first byte ``{``): one object per line, decoded with
  msgspec into typed rows in batches; blank lines are skipped; exact line numbers.
* **JSON array** (first byte ``[``): decoded whole (datasets, not logs), element ``i`` on the
  line where it starts; its errors also name it (``array element [i]``: a minified array is one
  line), and its rows carry ``__element``, so the flavors' errors name it too
  (``TraceFlavor.error``).

A value of the wrong type is worded alike in all three (``input_length = 'x' is not an integer;
write a count``).

Errors are :class:`TraceFileError` (exit 2): ``file:line: what is wrong; how to fix``.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from veeksha.errors import ConfigurationError
from veeksha.generate.traces.arrow import from_numpy, mask

__all__ = [
    "BATCH_ROWS",
    "ELEMENT",
    "LINE",
    "Field",
    "TraceFileError",
    "csv_lines",
    "detect_format",
    "loose_name",
    "read_batches",
    "unreadable",
]

BATCH_ROWS = 65_536
LINE = "__line"
#: a JSON array's rows also carry the index of their element (no such column in CSV, JSONL)
ELEMENT = "__element"
_CSV_BLOCK = 1 << 20  # larger blocks cost RSS (4 MiB: +150 MB over 10M rows), no speed
_JSONL_BLOCK = 1 << 20  # bytes of JSON lines decoded in one call
_SCAN_BLOCK = 1 << 22  # bytes searched at a time for blank lines and quotes (``csv_lines``)
_BYTE = re.compile(r"\(byte (\d+)\)")  # where msgspec says a JSON document went wrong
#: the UTF-8 byte order mark some tools (Excel's "CSV UTF-8", PowerShell) write first; it is
#: skipped, as by Python's utf-8-sig codec and pyarrow's CSV reader
BOM = b"\xef\xbb\xbf"

_ARROW_TYPES: dict[type, pa.DataType] = {
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
}


class TraceFileError(ConfigurationError):
    """A trace file cannot be replayed: ``file:line: what is wrong; how to fix`` (exit 2).

    In a JSON array, ``element`` is the index of the row's element, said after the line
    (``file:line: array element [i]: ...``); ``elements`` > 1: the line holds that many
    elements from ``element`` on and which one is wrong is not known. ``exact``: the CSV
    reader found the line in the file itself; a CSV line from the rows' ``__line`` (the
    flavors', the cache's errors) is the row's number and ``prepare`` finds its line
    (``csv_lines``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        line: int | None,
        message: str,
        element: int | None = None,
        elements: int = 1,
        exact: bool = False,
    ) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        if element is not None and elements > 1:
            where += (
                f": array elements [{element}] to [{element + elements - 1}] (all on this line)"
            )
        elif element is not None:
            where += f": array element [{element}]"
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line
        self.detail = message
        self.element = element
        self.elements = elements
        self.exact = exact


def unreadable(path: str | os.PathLike[str], exc: OSError) -> TraceFileError:
    """The error of a trace file that cannot be opened; a relative path that does not exist
    names the folder it was taken from (the current one, not the scenario file's)."""
    reason = "is a folder, not a trace file" if isinstance(exc, IsADirectoryError) else None
    message = f"cannot read the trace: {reason or exc.strerror or exc}; check trace_file"
    if isinstance(exc, FileNotFoundError) and not os.path.isabs(path):
        message += f" (a relative path is taken from the current folder, {os.getcwd()})"
    return TraceFileError(path, None, message)


@dataclass(frozen=True, slots=True)
class Field:
    """A field a flavor reads: its name, other names it is accepted under, and its type.

    ``kind`` is ``int``, ``float``, ``str`` (CSV: any text; JSON: a string or a number, kept as
    text), or ``object`` (a JSON value: an object or list; in CSV, its JSON text).
    """

    name: str
    kind: type = int
    aliases: tuple[str, ...] = ()
    required: bool = False
    help: str = field(default="", compare=False)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


#: files that are not text, by their first bytes: what they are, their usual extension and how
#: to get the text (``{name}``: the file's name, ``{out}``: a name for the text)
_BINARY: tuple[tuple[bytes, str, str, str], ...] = (
    (b"\x1f\x8b", "gzip-compressed file", ".gz", "decompress it (gunzip -c {name} > {out})"),
    (b"BZh", "bzip2-compressed file", ".bz2", "decompress it (bunzip2 -c {name} > {out})"),
    (b"\xfd7zXZ\x00", "xz-compressed file", ".xz", "decompress it (unxz -c {name} > {out})"),
    (
        b"\x28\xb5\x2f\xfd",
        "zstd-compressed file",
        ".zst",
        "decompress it (zstd -dc {name} > {out})",
    ),
    (b"PK\x03\x04", "zip archive", ".zip", "extract the trace from it (unzip {name})"),
    (b"PAR1", "Parquet file", ".parquet", "write it as CSV or JSON lines"),
    (
        b"\xff\xfe",
        "UTF-16 text file",
        "",
        "save it as UTF-8 (iconv -f UTF-16 -t UTF-8 {name} > {out})",
    ),
    (
        b"\xfe\xff",
        "UTF-16 text file",
        "",
        "save it as UTF-8 (iconv -f UTF-16 -t UTF-8 {name} > {out})",
    ),
)


def _not_text(path: Path) -> None:
    """Refuse a compressed or binary file by its first bytes, saying how to get the text."""
    with open(path, "rb") as file:
        head = file.read(4096)
    for magic, what, extension, fix in _BINARY:
        if head.startswith(magic):
            name = path.name
            if extension and name.endswith(extension):
                out = name[: -len(extension)]
            else:
                out = f"{path.stem}.utf8{path.suffix}" if not extension else f"{name}.txt"
            raise TraceFileError(
                path,
                None,
                f"is a {what}, not CSV or JSON lines text; {fix.format(name=name, out=out)}"
                " and point trace_file at the result",
            )
    if b"\x00" in head:
        raise TraceFileError(
            path, None, "is not text (it holds NUL bytes); give a CSV or JSON lines file"
        )


def detect_format(path: Path) -> str:
    """``csv``, ``jsonl`` or ``json`` (an array), from the extension, else the first byte.
    A compressed or binary file is refused (``TraceFileError``) whatever its name."""
    _not_text(path)
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    first = _first_byte(path)
    if first == b"[":
        return "json"
    if first == b"{":
        return "jsonl"
    if suffix == ".json":
        raise TraceFileError(path, 1, "a .json trace must hold a JSON array or JSON lines")
    return "csv"


def _first_byte(path: Path) -> bytes:
    with open(path, "rb") as file:
        chunk = file.read(4096).removeprefix(BOM)
        while chunk:
            stripped = chunk.lstrip()
            if stripped:
                return stripped[:1]
            chunk = file.read(4096)
    return b""


def read_batches(path: Path, fields: Sequence[Field]) -> Iterator[pa.RecordBatch]:
    """The file's rows as batches of the ``fields`` (canonical names) plus ``__line``.

    Raises :class:`TraceFileError` for an unreadable or empty file, a malformed line, a value of
    the wrong type or a required field missing from the header (CSV) or from a row (JSON).
    """
    try:
        if path.is_dir():
            raise TraceFileError(path, None, "is a folder, not a trace file; check trace_file")
        size = path.stat().st_size
        if size == 0 or not _first_byte(path):
            raise TraceFileError(path, None, "the trace file is empty; give a file with rows")
        fmt = detect_format(path)
        if fmt == "csv":
            yield from _csv_batches(path, fields)
        else:
            yield from _json_batches(path, fields, fmt)
    except OSError as exc:
        raise unreadable(path, exc) from None
    except UnicodeDecodeError as exc:
        raise TraceFileError(
            path, None, f"not UTF-8 text ({exc.reason}); give a CSV or JSON lines file"
        ) from None


# ------------------------------------------------------------------------------------------ CSV


def _csv_batches(path: Path, fields: Sequence[Field]) -> Iterator[pa.RecordBatch]:
    import pyarrow.csv as pacsv

    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    header = _csv_header(path, delimiter)
    chosen = _choose_columns(path, fields, header)
    types = {
        source: _ARROW_TYPES.get(f.kind, pa.string()) for f, source in chosen.items() if source
    }
    try:
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(block_size=_CSV_BLOCK, use_threads=False),
            parse_options=pacsv.ParseOptions(delimiter=delimiter),
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                include_columns=list(types),
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid as exc:
        raise _csv_error(path, fields, chosen, delimiter, str(exc)) from None
    row = 0
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except pa.ArrowInvalid as exc:
            raise _csv_error(path, fields, chosen, delimiter, str(exc)) from None
        n = batch.num_rows
        arrays = []
        names = []
        for f, source in chosen.items():
            names.append(f.name)
            if source is None:
                arrays.append(pa.nulls(n, _ARROW_TYPES.get(f.kind, pa.string())))
            else:
                arrays.append(batch.column(source))
        names.append(LINE)
        arrays.append(from_numpy(np.arange(row + 2, row + 2 + n, dtype=np.int64)))
        row += n
        out = pa.RecordBatch.from_arrays(arrays, names=names)
        for f, _ in chosen.items():
            if f.required and out.column(f.name).null_count:
                index = int(mask(out.column(f.name).is_null()).argmax())
                line = _csv_line_of_row(path, delimiter, row - n + int(index))
                raise TraceFileError(
                    path, line, f"no value for {f.name!r}; every row needs one", exact=True
                )
        yield out
    if row == 0:
        raise TraceFileError(path, 2, "the trace has a header but no rows; add rows", exact=True)


def _csv_header(path: Path, delimiter: str) -> list[str]:
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as file:
        for line in csv.reader(file, delimiter=delimiter):
            if line:
                return [name.strip() for name in line]
    raise TraceFileError(path, 1, "the trace file is empty; give a file with rows", exact=True)


def _choose_columns(
    path: Path, fields: Sequence[Field], header: Sequence[str]
) -> dict[Field, str | None]:
    chosen: dict[Field, str | None] = {}
    present = set(header)
    for f in fields:
        source = next((name for name in f.names if name in present), None)
        if source is None and f.required:
            names = " or ".join(repr(n) for n in f.names)
            wanted = {loose_name(n): n for n in f.names}
            near = [(h, wanted[loose_name(h)]) for h in header if loose_name(h) in wanted]
            fix = (
                f"rename {near[0][0]!r} to {near[0][1]!r} (names are matched exactly)"
                if near
                else "add it to the header"
            )
            raise TraceFileError(
                path, 1, f"no column {names} (columns: {', '.join(header)}); {fix}", exact=True
            )
        chosen[f] = source
    return chosen


def loose_name(name: str) -> str:
    """A column name without case, spaces, ``_`` or ``-``: how near-misses are told."""
    return re.sub(r"[\s_\-]+", "", name).lower()


def _csv_line_of_row(path: Path, delimiter: str, row: int) -> int:
    """The line a data row (0-based, after the header) starts on, by a Python scan."""
    return _row_starts(path, delimiter, [row]).get(row, row + 2)


def _row_starts(path: Path, delimiter: str, rows: Collection[int]) -> dict[int, int]:
    """The lines data rows (0-based, after the header; -1: the header) start on, by one Python
    scan of the file up to the last of them (blank lines skipped, quoted values over several
    lines followed, as pyarrow's reader does)."""
    wanted = sorted(set(rows))
    found: dict[int, int] = {}
    if not wanted:
        return found
    if _plain_lines(path, wanted[-1] + 2):
        return {row: row + 2 for row in wanted}
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as file:
        reader = csv.reader(file, delimiter=delimiter)
        data_row = -2  # (-1: the header)
        start = 1
        at = 0
        for record in reader:
            if record:
                data_row += 1
                while at < len(wanted) and wanted[at] < data_row:
                    at += 1  # (a row the file does not have: not found)
                if at < len(wanted) and wanted[at] == data_row:
                    found[data_row] = start
                    at += 1
                    if at == len(wanted):
                        break
            start = reader.line_num + 1
    return found


def _plain_lines(path: Path, lines: int) -> bool:
    """Whether the first ``lines`` lines of the file hold no blank line and no quote (so row k
    is on line k + 2), told at the speed of a byte search (a Python scan of a CSV is ~0.7 s a
    million rows; the usual trace has neither)."""
    seen = 0
    last = b"\n"  # (the end of the chunk before: a blank first line is a blank line too)
    with open(path, "rb") as file:
        chunk = file.read(_SCAN_BLOCK).removeprefix(BOM)
        while chunk and seen < lines:
            edge = last + chunk[:2]
            for mark in (b"\n\n", b"\n\r\n"):
                if mark in chunk or mark in edge:
                    return False
            if b'"' in chunk:
                return False
            seen += chunk.count(b"\n")
            last = chunk[-2:]
            chunk = file.read(_SCAN_BLOCK)
    return True


def csv_lines(path: Path, lines: Iterable[int]) -> dict[int, int]:
    """The lines of a CSV where the rows the reader numbered ``lines`` (``__line``) start.

    The reader numbers rows from line 2 on (row k: line k + 2: pyarrow's reader says no more),
    which holds until a blank line or a quoted value over several lines; this finds each row's
    real line, with one scan of the file up to the last of them, paid only for the lines an
    error or a warning shows. Line 1 is the header's."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    numbered = {line: line - 2 for line in lines if line >= 1}
    starts = _row_starts(path, delimiter, numbered.values())
    return {line: starts.get(row, line) for line, row in numbered.items()}


def _csv_error(
    path: Path,
    fields: Sequence[Field],
    chosen: dict[Field, str | None],
    delimiter: str,
    arrow_message: str,
) -> TraceFileError:
    """Find the first bad row with a Python scan and say what is wrong with it."""
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as file:
        reader = csv.reader(file, delimiter=delimiter)
        header: list[str] | None = None
        start = 1
        for record in reader:
            if not record:
                start = reader.line_num + 1
                continue
            if header is None:
                header = [name.strip() for name in record]
                start = reader.line_num + 1
                continue
            if len(record) != len(header):
                return TraceFileError(
                    path,
                    start,
                    f"{len(record)} values where the header has {len(header)}; "
                    "give one value per column",
                    exact=True,
                )
            for f, source in chosen.items():
                if source is None:
                    continue
                text = record[header.index(source)].strip()
                if f.kind is int:
                    try:
                        int(text)
                    except ValueError:
                        return TraceFileError(
                            path,
                            start,
                            f"{source} = {text!r} is not an integer; write a count",
                            exact=True,
                        )
                elif f.kind is float:
                    try:
                        float(text)
                    except ValueError:
                        return TraceFileError(
                            path,
                            start,
                            f"{source} = {text!r} is not a number; write one",
                            exact=True,
                        )
            start = reader.line_num + 1
    return TraceFileError(path, None, f"cannot parse the CSV ({arrow_message}); check the file")


# ----------------------------------------------------------------------------------------- JSON


def _row_struct(fields: Sequence[Field]) -> tuple[type[msgspec.Struct], dict[str, str]]:
    """A Struct with one optional attribute per accepted name (``f0``, ``f1``...: file names
    need not be identifiers), and the attribute of each name."""
    specs: list[tuple[str, Any, Any]] = []
    attributes: dict[str, str] = {}
    for f in fields:
        kind: Any
        if f.kind is str:
            kind = str | int | float | None
        elif f.kind is float:
            kind = float | None
        elif f.kind is int:
            kind = int | None
        else:
            kind = Any
        for name in f.names:
            attributes[name] = f"f{len(attributes)}"
            specs.append((attributes[name], kind, None))
    rename = {attribute: name for name, attribute in attributes.items()}
    return msgspec.defstruct("TraceRow", specs, rename=rename), attributes


def _json_batches(path: Path, fields: Sequence[Field], fmt: str) -> Iterator[pa.RecordBatch]:
    row_type, attributes = _row_struct(fields)
    decoder = msgspec.json.Decoder(row_type)
    rows: list[Any] = []
    lines: list[int] = []
    total = 0
    first_element = 0
    if fmt == "json":
        data = path.read_bytes().removeprefix(BOM)  # (a BOM shifts no line)
        try:
            items = msgspec.json.decode(data, type=list[msgspec.Raw])
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            byte = _BYTE.search(str(exc))
            line_of = data.count(b"\n", 0, int(byte.group(1))) + 1 if byte else None
            raise TraceFileError(
                path, line_of, f"not a JSON array ({exc}); write one JSON array of objects"
            ) from None
        offset = 0  # where the previous element ends (elements are the file's bytes, in order)
        line = 1  # the line of `offset`; first_element: the index in the array of rows[0]
        for index, item in enumerate(items):
            raw = bytes(item)
            at = data.find(raw[:1], offset) if raw else offset
            line += data.count(b"\n", offset, at)
            rows.append(_decode(decoder, raw, path, line, fields, index))
            lines.append(line)
            line += raw.count(b"\n")
            offset = at + len(raw)
            if len(rows) >= BATCH_ROWS:
                total += len(rows)
                yield _to_batch(rows, lines, fields, attributes, path, first_element)
                first_element = index + 1
                rows, lines = [], []
    else:
        # a block of lines is decoded in one call, as a JSON array (a call per line cost half
        # the time); a block that fails is decoded again line by line, for the line and message
        many = msgspec.json.Decoder(list[row_type])  # type: ignore[valid-type]
        number = 0
        with open(path, "rb") as file:
            while block := file.readlines(_JSONL_BLOCK):
                if not number:
                    block[0] = block[0].removeprefix(BOM)
                kept = []
                for raw in block:
                    number += 1
                    if raw.strip():
                        kept.append(raw)
                        lines.append(number)
                if not kept:
                    continue
                try:
                    rows.extend(many.decode(b"[" + b",".join(kept) + b"]"))
                except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                    first = len(lines) - len(kept)
                    for raw, line in zip(kept, lines[first:], strict=True):
                        _decode(decoder, raw, path, line, fields)
                    raise TraceFileError(  # (no line fails alone: lines that join wrongly)
                        path, lines[first], f"malformed JSON lines ({exc}); one object a line"
                    ) from None
                if len(rows) >= BATCH_ROWS:
                    total += len(rows)
                    yield _to_batch(rows, lines, fields, attributes, path)
                    rows, lines = [], []
    if rows:
        total += len(rows)
        element = first_element if fmt == "json" else None
        yield _to_batch(rows, lines, fields, attributes, path, element)
    if total == 0:
        raise TraceFileError(path, None, "the trace holds no rows; add rows")


def _decode(
    decoder: msgspec.json.Decoder[Any],
    raw: bytes,
    path: Path,
    line: int,
    fields: Sequence[Field],
    element: int | None = None,
) -> Any:
    """One JSON row (a line, or ``element`` of an array); a bad one is an error in the words
    of the CSV reader's for the same mistake (``input_length = 'x' is not an integer``)."""
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise TraceFileError(
            path, line, _element(element) + _wrong_value(raw, fields, element, exc)
        ) from None
    except msgspec.DecodeError as exc:
        text = raw.decode("utf-8", "replace").strip()
        shown = text if len(text) <= 60 else text[:57] + "..."
        fix = "write one JSON object per line" if element is None else "fix the element"
        raise TraceFileError(
            path, line, f"{_element(element)}malformed JSON ({exc}): {shown!r}; {fix}"
        ) from None


def _element(element: int | None) -> str:
    """The prefix that names an array's element (from 0, as jq's ``.[i]``), or nothing."""
    return "" if element is None else f"array element [{element}]: "


def _shown(value: Any) -> str:
    """A value as an error shows it: a string as the CSV errors do (``'x'``), else its JSON."""
    if isinstance(value, str):
        return repr(value)
    return msgspec.json.encode(value).decode()


def _wrong_value(
    raw: bytes, fields: Sequence[Field], element: int | None, exc: msgspec.ValidationError
) -> str:
    """What is wrong with a row msgspec refused: the key and value, and how to fix it."""
    value = msgspec.json.decode(raw)  # (valid JSON: only its types were refused)
    if not isinstance(value, dict):
        unit = "line" if element is None else "element"
        return f"{_shown(value)} is not a JSON object; write one object per {unit}"
    for f in fields:
        for name in f.names:
            got = value.get(name)
            if got is None:
                continue
            if f.kind is int and type(got) is not int:
                return f"{name} = {_shown(got)} is not an integer; write a count"
            if f.kind is float and type(got) not in (int, float):
                return f"{name} = {_shown(got)} is not a number; write one"
            if f.kind is str and type(got) not in (str, int, float):
                return f"{name} = {_shown(got)} is not text or a number; write a string"
    return f"{exc}; fix the value"  # (not reached: every type the struct refuses is above)


def _to_batch(
    rows: list[Any],
    lines: list[int],
    fields: Sequence[Field],
    attributes: dict[str, str],
    path: Path,
    first_element: int | None = None,
) -> pa.RecordBatch:
    """The rows as a batch; ``first_element`` is rows[0]'s index in a JSON array (else None)."""
    names: list[str] = []
    arrays: list[pa.Array] = []
    n = len(rows)
    for f in fields:
        values: list[Any] | None = None
        for alias in reversed(f.names):  # the canonical name wins over an alias
            got = list(map(attrgetter(attributes[alias]), rows))
            if got.count(None) == n:  # (the common case: a name the file does not use)
                continue
            if values is None:
                values = got
            else:
                values = [g if g is not None else v for g, v in zip(got, values, strict=True)]
        if values is None:
            values = [None] * n
        if f.required and None in values:
            names_text = " or ".join(repr(name) for name in f.names)
            at = values.index(None)
            element = None if first_element is None else first_element + at
            raise TraceFileError(
                path,
                lines[at],
                f"{_element(element)}no {names_text} in this row; every row needs one",
            )
        if f.kind is str:
            values = [v if v is None or isinstance(v, str) else str(v) for v in values]
            arrays.append(pa.array(values, pa.string()))
        elif f.kind is object:
            encoded = msgspec.json.encode
            arrays.append(
                pa.array([None if v is None else encoded(v).decode() for v in values], pa.string())
            )
        else:
            arrays.append(pa.array(values, _ARROW_TYPES[f.kind]))
        names.append(f.name)
    names.append(LINE)
    arrays.append(pa.array(lines, pa.int64()))
    if first_element is not None:
        names.append(ELEMENT)
        arrays.append(from_numpy(np.arange(first_element, first_element + n, dtype=np.int64)))
    return pa.RecordBatch.from_arrays(arrays, names=names)


def jsonl_text(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as JSON lines (for tests and the shipped example traces)."""
    out = io.StringIO()
    for row in rows:
        out.write(msgspec.json.encode(row).decode())
        out.write("\n")
    return out.getvalue()
