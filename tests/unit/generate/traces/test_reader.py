"""The trace reader and the request_log flavor's validation: file:line errors, exit code 2."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.unit.generate.traces.helpers import trace_scenario, write_csv, write_jsonl
from veeksha.generate.traces import TraceFileError, open_trace


def _error(path: Path, flavor: str = "request_log") -> str:
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(path, flavor))
    assert caught.value.exit_code == 2
    return str(caught.value)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("a.csv", "input_length\n5\n", ":1: no column 'output_length' or 'num_decode_tokens'"),
        ("a.csv", "input_length,output_length\n1,2\n\n3,x\n", ":4: output_length = 'x' is not"),
        ("a.csv", "input_length,output_length\n1,2\n3\n", ":3: 1 values where the header has 2"),
        ("a.csv", "input_length,output_length\n1,2\n4,-2\n", ":3: output_length = -2 is negative"),
        ("a.csv", "input_length,output_length\n", ":2: the trace has a header but no rows"),
        ("a.csv", "", ": the trace file is empty"),
        ("a.jsonl", '{"input_length": 1, "output_length": 2}\n{oops\n', ":2: malformed JSON"),
        ("a.jsonl", '\n{"input_length": 5}\n', ":2: no 'output_length' or 'num_decode_tokens'"),
        ("a.jsonl", '{"input_length": "many", "output_length": 2}\n', ":1: input_length = 'many'"),
        ("a.jsonl", '{"input_length": 1, "output_length": 2.5}\n', ":1: output_length = 2.5 is"),
        ("a.jsonl", "[1, 2]\n", ":1: [1,2] is not a JSON object; write one object per line"),
        ("a.jsonl", "\n\n", ": the trace file is empty"),
    ],
)
def test_bad_files_name_the_file_and_line(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    message = _error(path)
    assert message.startswith(str(path) + expected.split(":", 2)[0]) or str(path) in message
    assert expected in message, message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    message = _error(tmp_path / "nope.csv")
    assert "nope.csv: cannot read the trace" in message
    assert "check trace_file" in message
    assert "current folder" not in message  # (an absolute path)


def test_a_missing_relative_path_names_the_folder_it_was_taken_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    message = _error(Path("traces/nope.csv"))
    assert message.startswith("traces/nope.csv: cannot read the trace")
    assert f"(a relative path is taken from the current folder, {tmp_path})" in message


def test_aliases_csv_and_jsonl_read_the_same(tmp_path: Path) -> None:
    csv = write_csv(tmp_path / "a.csv", "num_prefill_tokens,num_decode_tokens", ["5,3", "7,2"])
    jsonl = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"num_prefill_tokens": 5, "num_decode_tokens": 3},
            {"input_length": 7, "output_length": 2},
        ],
    )
    for path in (csv, jsonl):
        trace = open_trace(trace_scenario(path))
        assert (trace.prepared.sessions, trace.prepared.rows) == (2, 2)
        rows = trace.table.rows(0, 2)[0]
        assert rows.prompt_tokens.tolist() == [5, 7]
        assert rows.output_tokens.tolist() == [3, 2]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("a.csv", "input_length,output_length\r\n5,3\r\n7,2\r\n"),
        ("a.trace", "input_length,output_length\n5,3\n7,2\n"),  # (told CSV by its first byte)
        (
            "a.jsonl",
            '{"input_length": 5, "output_length": 3}\n{"input_length": 7, "output_length": 2}',
        ),
        (
            "a.trace",
            '{"input_length": 5, "output_length": 3}\n{"input_length": 7, "output_length": 2}',
        ),
        (
            "a.json",
            '[{"input_length": 5, "output_length": 3},\n {"input_length": 7, "output_length": 2}]',
        ),
    ],
)
def test_a_utf8_byte_order_mark_is_skipped_in_every_format(
    tmp_path: Path, name: str, text: str
) -> None:
    # Excel's "CSV UTF-8" and PowerShell write one: it made the first column '\ufeffinput_length'
    # (no column 'input_length'), and JSON "malformed" at byte 0
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    for flavor in ("request_log", "auto"):
        scenario = trace_scenario(path, generator={"flavor": {"type": flavor}})
        trace = open_trace(scenario)
        assert trace.prepared.flavor == "request_log"
        rows = trace.table.rows(0, 2)[0]
        assert rows.prompt_tokens.tolist() == [5, 7]
        assert rows.output_tokens.tolist() == [3, 2]


@pytest.mark.parametrize("flavor", ["mooncake", "auto"])
@pytest.mark.parametrize(
    ("name", "pack", "expected"),
    [
        (
            "m.jsonl.gz",
            "gzip",
            "m.jsonl.gz: is a gzip-compressed file, not CSV or JSON lines text; decompress it"
            " (gunzip -c m.jsonl.gz > m.jsonl) and point trace_file at the result",
        ),
        (
            "m.jsonl",  # (a compressed file under a text file's name)
            "bz2",
            "m.jsonl: is a bzip2-compressed file, not CSV or JSON lines text; decompress it"
            " (bunzip2 -c m.jsonl > m.jsonl.txt) and point trace_file at the result",
        ),
        (
            "m.csv",
            "utf-16",
            "m.csv: is a UTF-16 text file, not CSV or JSON lines text; save it as UTF-8 (iconv"
            " -f UTF-16 -t UTF-8 m.csv > m.utf8.csv) and point trace_file at the result",
        ),
    ],
)
def test_a_compressed_or_utf16_trace_is_refused_saying_how_to_get_its_text(
    tmp_path: Path, name: str, pack: str, expected: str, flavor: str
) -> None:
    # it was read as CSV: "no column 'input_length' (columns: \x1f\x8b\x08...)", binary noise
    import bz2
    import gzip

    text = '{"timestamp": 0, "input_length": 5, "output_length": 3, "hash_ids": [0]}\n'
    packed = {"gzip": gzip.compress, "bz2": bz2.compress}.get(pack)
    data = packed(text.encode()) if packed else text.encode("utf-16")
    path = tmp_path / name
    path.write_bytes(data)
    message = _error(path, flavor)
    assert message == f"{tmp_path}/{expected}"


def _spread(column: str, values: list[str]) -> str:
    """A CSV whose rows are not where the reader numbered them (row k: line k + 2): a blank
    line, a quoted note over two lines, a CRLF blank line."""
    rows = [
        '0.0,"one line",5,3',  # line 3
        '0.5,"two\nlines",0,3',  # lines 4-5: 0 prompt tokens
        "",
        "1.0,,4,0",  # line 7: 0 output tokens
        "2.0,,4,2",  # line 8
    ]
    values = values or [""] * len(rows)
    rows = [f"{row},{value}" if row else "\r" for row, value in zip(rows, values, strict=True)]
    return f"timestamp,note,input_length,output_length,{column}\n\n" + "\n".join(rows) + "\n"


@pytest.mark.parametrize(
    ("column", "values", "tail", "expected"),
    [
        ("client", [], "3.0,,4,-2,\n", ":9: output_length = -2 is negative"),
        ("client", [], "\n1.5,,4,2,\n", ":10: this row arrives before the row above it"),
        ("client", [], "3.0,,4,2,big\n", ":9: client 'big' is not a client of the scenario"),
        ("session_id", ["a", "b", "", "c", "d"], "3.0,,4,2,\n", ":9: "),
    ],
)
def test_a_csvs_errors_name_its_lines_past_blank_lines_and_values_over_several_lines(
    tmp_path: Path, column: str, values: list[str], tail: str, expected: str
) -> None:
    # the flavors' and the cache's errors took the reader's row numbers (row k: line k + 2)
    path = tmp_path / "a.csv"
    path.write_text(_spread(column, values) + tail)
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(path, traffic_scheduler={"type": "trace"}))
    assert f"{path}{expected}" in str(caught.value), str(caught.value)


@pytest.mark.parametrize("block", [1 << 22, 1, 2, 3, 5])
def test_a_csvs_rows_not_replayed_are_named_by_their_lines_past_blank_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    # (small blocks: the search for blank lines sees "\n\r\n" cut at every place)
    monkeypatch.setattr("veeksha.generate.traces.reader._SCAN_BLOCK", block)
    path = tmp_path / "a.csv"
    path.write_text(_spread("client", []).replace('"one line"', "one line"))
    prepared = open_trace(trace_scenario(path)).prepared
    assert (prepared.sessions, prepared.unservable_lines) == (2, [4, 7])
    assert prepared.warnings()[0].endswith("; first lines 4, 7")
    assert open_trace(trace_scenario(path)).prepared.unservable_lines == [4, 7]  # (the cache)
    path.write_text(_spread("client", []).replace('"two\nlines"', "two lines"))  # (no quote)
    assert open_trace(trace_scenario(path)).prepared.unservable_lines == [4, 6]


def test_a_csv_without_blank_lines_or_quotes_is_not_read_again_for_its_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import csv

    from veeksha.generate.traces import reader

    readers: list[object] = []
    real = csv.reader

    def counted(*args: Any, **kwargs: Any) -> Any:
        readers.append(args)
        return real(*args, **kwargs)

    path = write_csv(tmp_path / "a.csv", "input_length,output_length", ["5,3", "0,3", "4,0", "2,2"])
    monkeypatch.setattr(reader.csv, "reader", counted)
    assert open_trace(trace_scenario(path)).prepared.unservable_lines == [3, 4]
    assert len(readers) == 1  # the header's (~0.7 s a million rows to read them all)


def test_unservable_rows_are_counted_with_their_lines(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "a.csv", "input_length,output_length", ["5,3", "0,3", "4,0", "2,2"])
    prepared = open_trace(trace_scenario(path)).prepared
    assert prepared.sessions == 2
    assert (prepared.unservable_rows, prepared.unservable_lines) == (2, [3, 4])
    assert prepared.warnings() == [
        "trace: 2 not replayed: zero_length (rows of 2 session(s) with a 0 prompt or output"
        " length; a request needs at least 1 of each, and a session with such a row is not"
        " replayed at all); first lines 3, 4"
    ]
    # one account of them: run.log's line of what is replayed only points at the warning
    assert prepared.describe() == (
        f"request_log trace {path}: 2 requests in 2 sessions; the warnings below say which rows"
        " are not replayed as the trace has them"
    )


def test_a_trace_with_only_unservable_rows_is_refused(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "a.csv", "input_length,output_length", ["0,3"])
    assert "no row can be served" in _error(path)


def test_the_cache_is_reused_until_the_file_changes(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "a.csv", "input_length,output_length", ["5,3"])
    first = open_trace(trace_scenario(path)).prepared
    again = open_trace(trace_scenario(path)).prepared
    assert (first.reused, again.reused, again.cache) == (False, True, first.cache)
    write_csv(path, "input_length,output_length", ["5,3", "6,1"])
    changed = open_trace(trace_scenario(path)).prepared
    assert (changed.reused, changed.sessions) == (False, 2)


def test_the_cache_is_made_again_when_the_file_is_rewritten_to_its_size_and_time(
    tmp_path: Path,
) -> None:
    # `cp -p`, `rsync -t`, `touch -r` or an archive restore the modification time: a trace
    # rewritten in place to the same size then kept the old cache (size and mtime unchanged)
    path = write_csv(tmp_path / "a.csv", "input_length,output_length", ["5,3", "6,1"])
    stat = path.stat()
    first = open_trace(trace_scenario(path)).prepared
    write_csv(path, "input_length,output_length", ["5,3", "6,0"])  # (one failed row now)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    changed = open_trace(trace_scenario(path)).prepared
    assert (first.sessions, changed.reused, changed.sessions) == (2, False, 1)
    assert changed.unservable_lines == [3]
    assert [p.name for p in tmp_path.glob(".a.csv.*.veeksha.parquet")] == [
        Path(changed.cache).name
    ]  # (the old cache is removed)


def test_session_ids_group_rows_into_chats_in_order_of_arrival(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"session_id": "b", "input_length": 5, "output_length": 3, "timestamp": 1.0},
            {"session_id": 7, "input_length": 6, "output_length": 4, "timestamp": 0.5},
            {"session_id": "b", "input_length": 7, "output_length": 2, "timestamp": 2.0},
        ],
    )
    trace = open_trace(trace_scenario(path))
    first, second = trace.table.rows(0, 2)[0], None
    assert first.bounds.tolist() == [0, 1, 3]  # session "7" (earlier) first, then "b"
    assert first.parents == [(), (), (0,)]
    assert first.history == [None, None, 0]
    assert second is None


def test_session_id_on_some_rows_only_is_refused(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"session_id": 1, "input_length": 5, "output_length": 3},
            {"input_length": 5, "output_length": 3},
        ],
    )
    assert ":2: this row has no session_id" in _error(path)


def test_a_folder_is_not_a_trace(tmp_path: Path) -> None:
    assert "is a folder, not a trace file" in _error(tmp_path)


def test_a_bad_json_line_deep_in_a_big_file_is_named_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veeksha.generate.traces import reader

    monkeypatch.setattr(reader, "_JSONL_BLOCK", 256)  # many blocks, each decoded in one call
    good = '{"input_length": 3, "output_length": 2}\n'
    path = tmp_path / "a.jsonl"
    path.write_text(good * 40 + "\n" + good * 10 + '{"input_length": 3, "output_length": "x"}\n')
    assert ":52: output_length = 'x' is not an integer; write a count" in _error(path)
    path.write_text(good * 30 + "\n\n" + good * 20 + '{"input_length": 3,\n')
    assert ":53: malformed JSON" in _error(path)


_GOOD = '  {"input_length": 3, "output_length": 2},\n'


@pytest.mark.parametrize(
    ("bad", "csv_row", "message"),
    [
        (
            '{"input_length": "x", "output_length": 2}',
            "x,2",
            "input_length = 'x' is not an integer; write a count",
        ),
        (
            '{"input_length": 3}',
            None,  # (a CSV's missing column is a header error, line 1)
            "no 'output_length' or 'num_decode_tokens' in this row; every row needs one",
        ),
        (  # (the flavor's check, not the reader's: worded and located alike)
            '{"input_length": 3, "output_length": -2}',
            "3,-2",
            "output_length = -2 is negative; token counts must be 0 or more",
        ),
    ],
)
def test_a_bad_element_of_a_json_array_is_named_by_its_line_and_index(
    tmp_path: Path, bad: str, csv_row: str | None, message: str
) -> None:
    """A JSON array's bad element is reported at its own line and index (not the array's
    first line), in the JSON lines and CSV readers' words for the same mistake."""
    array = tmp_path / "a.json"
    array.write_text("[\n" + _GOOD * 57 + "  " + bad + "\n]\n")
    assert _error(array) == f"{array}:59: array element [57]: {message}"
    lines = tmp_path / "a.jsonl"
    lines.write_text(_GOOD.strip().rstrip(",") + "\n" + bad + "\n")
    assert _error(lines) == f"{lines}:2: {message}"
    if csv_row is not None:
        table = write_csv(tmp_path / "a.csv", "input_length,output_length", ["3,2", csv_row])
        assert _error(table) == f"{table}:3: {message}"


def test_json_array_errors_name_elements_across_batches_and_lines_of_a_minified_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veeksha.generate.traces import reader

    monkeypatch.setattr(reader, "BATCH_ROWS", 4)  # the bad element is in the third batch
    good = '{"input_length": 3,\n "output_length": 2}'  # each element spans two lines
    path = tmp_path / "a.json"
    path.write_text("[" + ",\n".join([good] * 9 + ['{"input_length": 3}']) + "]")
    assert _error(path).startswith(f"{path}:19: array element [9]: no 'output_length'")
    path.write_text("[\n" + good + "\n" + good + "]")  # no comma between the elements
    assert _error(path).startswith(f"{path}:4: not a JSON array (JSON is malformed")
    one = '{"input_length": 1, "output_length": 1}'
    path.write_text("[" + ", ".join([one] * 3 + ['"a"']) + "]")  # minified: all on line 1
    assert _error(path) == (
        f"{path}:1: array element [3]: 'a' is not a JSON object; write one object per element"
    )


def test_a_flavors_error_in_a_json_array_names_the_element_as_the_readers_do(
    tmp_path: Path,
) -> None:
    """A flavor's own check (a dataset's conversations, a session's topology) names the
    element of a JSON array as the reader's errors do, in a minified array too."""
    import json

    good = {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]}
    rows = [good] * 3 + [{"conversations": "oops"}, good]
    message = (
        "array element [3]: conversations is not a list of messages; give a list of objects"
        " with 'from' and 'value'"
    )
    path = tmp_path / "c.json"
    path.write_text(json.dumps(rows, indent=1))  # element 3 starts on line 38
    assert _error(path, "untimed_content_multi_turn") == f"{path}:38: {message}"
    path.write_text(json.dumps(rows))  # minified: every element on line 1
    assert _error(path, "untimed_content_multi_turn") == f"{path}:1: {message}"
    # a session's error, found when its rows are linked
    node = {"session_id": 1, "new_input_length": 3, "output_length": 1}
    context = {"parent_nodes": [], "history_parent": None, "wait_after_ready": 0}
    rows = [{**node, "session_context": {**context, "node_id": k}} for k in (0, 1, 1)]
    path = tmp_path / "t.json"
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]")
    assert _error(path, "timed_synthetic_session").startswith(
        f"{path}:4: array element [2]: node_id 1 appears twice in session 1"
    )
    path.write_text(json.dumps(rows))  # minified: the elements of the line are named
    assert _error(path, "timed_synthetic_session").startswith(
        f"{path}:1: array elements [0] to [2] (all on this line): node_id 1 appears twice"
    )
