"""The server watch's stop in two steps: the request goes at once, the wait comes later (the run
imports its evaluation between them, while the watch's process scrapes one last time)."""

from __future__ import annotations

import json
import os
import threading
from typing import IO, Any

from veeksha.engine.server_watch import ServerWatch
from veeksha.server.watch_process import MERGE_REQUEST


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)

    def warning(self, message: str) -> None:
        self.lines.append("warning: " + message)


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
