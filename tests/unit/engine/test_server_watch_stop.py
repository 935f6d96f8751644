"""The server watch's stop in two steps: the request goes at once, the wait comes later (the run
imports its evaluation between them, while the watch's process scrapes one last time); the
parts it hands over are merged as its status line comes, in the thread that reads it."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import IO, Any

import pytest

from tests.unit.engine.lines_log import Log
from veeksha.engine import server_watch
from veeksha.engine.server_watch import ServerWatch
from veeksha.server.watch_process import MERGE_REQUEST


class FakeWatchProcess:
    """The watch's process as ``ServerWatch`` sees it: its standard input (what the test reads
    back) and output (what the test writes), both pipes."""

    def __init__(self) -> None:
        read, write = os.pipe()
        self.stdout: IO[bytes] = open(read, "rb")  # noqa: SIM115
        self.said: IO[bytes] = open(write, "wb")  # noqa: SIM115
        read, write = os.pipe()
        self.stdin: IO[bytes] = open(write, "wb")  # noqa: SIM115
        self.heard: IO[bytes] = open(read, "rb")  # noqa: SIM115
        self.returncode: int | None = None

    def say(self, message: dict[str, Any]) -> None:
        self.said.write(json.dumps(message).encode() + b"\n")
        self.said.flush()

    def exit(self) -> None:
        self.said.close()
        self.returncode = 0

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_the_stop_request_goes_at_once_and_stop_then_only_waits_for_the_status() -> None:
    process = FakeWatchProcess()
    watch = ServerWatch(1.0, Log(), process)  # type: ignore[arg-type]
    process.say({"ready": True})
    watch.wait_ready(5.0)

    watch.request_stop()
    # the request (merge, then the end of its input) is there before any status came back
    assert process.heard.read() == MERGE_REQUEST
    assert process.stdin.closed

    stopped: list[dict[str, Any]] = []
    stopping = threading.Thread(target=lambda: stopped.append(watch.stop()))
    stopping.start()
    stopping.join(0.2)
    assert stopping.is_alive()  # (waits for the status line: the last scrape is not done)
    status = {"url": "http://127.0.0.1:1/metrics", "status": "ok", "rows": 3}
    process.say({"status": status, "parts": False})
    process.exit()
    stopping.join(5.0)
    assert stopped == [status]
    process.heard.close()


def test_stop_alone_still_asks_for_the_last_scrape() -> None:
    process = FakeWatchProcess()
    watch = ServerWatch(1.0, Log(), process)  # type: ignore[arg-type]
    status = {"url": "http://127.0.0.1:1/metrics", "status": "ok", "rows": 1}
    process.say({"status": status, "parts": False})  # (answers as soon as it is asked)
    process.exit()
    assert watch.stop() == status
    assert process.heard.read() == MERGE_REQUEST
    process.heard.close()


def test_the_parts_are_merged_as_the_status_line_comes_before_stop_is_called(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    merged = threading.Event()
    calls: list[tuple[Path, str]] = []

    def merge(run_dir: Path, metadata: dict[str, str]) -> Path:
        calls.append((run_dir, threading.current_thread().name))
        merged.set()
        return run_dir / "server_metrics.parquet"

    monkeypatch.setattr(server_watch, "merge_parts", merge)
    process = FakeWatchProcess()
    watch = ServerWatch(1.0, Log(), process)  # type: ignore[arg-type]
    watch.begin(tmp_path, 0, {"run_id": "r"})
    watch.request_stop()
    status = {"url": "http://127.0.0.1:1/metrics", "status": "ok", "rows": 3}
    process.say({"status": status, "parts": True})
    # merged by the thread that reads the watch's output, without waiting for stop()
    assert merged.wait(5.0)
    assert calls == [(tmp_path, "server-watch")]
    process.exit()
    assert watch.stop() == status
    process.heard.close()


def test_a_merge_that_fails_is_said_in_the_status_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def merge(run_dir: Path, metadata: dict[str, str]) -> Path:
        raise OSError("No space left on device")

    monkeypatch.setattr(server_watch, "merge_parts", merge)
    process = FakeWatchProcess()
    log = Log()
    watch = ServerWatch(1.0, log, process)  # type: ignore[arg-type]
    watch.begin(tmp_path, 0, {})
    process.say({"status": {"status": "ok", "rows": 3}, "parts": True})
    process.exit()
    status = watch.stop()
    assert status["write_error"] == "No space left on device"
    assert any("cannot write server_metrics.parquet" in line for line in log.lines)
    process.heard.close()
