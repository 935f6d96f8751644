"""``veeksha.forked``: a helper forked from this process behaves as a fresh interpreter would."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

from veeksha.forked import ForkedProcess, prepare, single_threaded

_WAIT_S = 20.0


def _echo_upper() -> int:
    data = sys.stdin.read()
    sys.stdout.write(data.upper())
    return 0


def test_pipes_carry_its_standard_input_and_output() -> None:
    proc = ForkedProcess(_echo_upper, "t-echo", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(b"hello, fork\n")
    proc.stdin.close()
    assert proc.stdout.read() == b"HELLO, FORK\n"
    assert proc.wait(_WAIT_S) == 0
    proc.stdout.close()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (lambda: 7, 7),
        (lambda: None, 0),
        (lambda: sys.exit(3), 3),
        (lambda: sys.exit(None), 0),
        (lambda: sys.exit("a message"), 1),
    ],
    ids=["returns 7", "returns None", "exit 3", "exit None", "exit with a message"],
)
def test_exit_code_is_what_the_target_returned_or_exited_with(body, code: int) -> None:
    assert ForkedProcess(body, "t-code").wait(_WAIT_S) == code


def test_an_uncaught_exception_exits_1_with_its_traceback_on_stderr() -> None:
    def fail() -> None:
        raise ValueError("broken on purpose")

    with tempfile.TemporaryFile() as err:
        proc = ForkedProcess(fail, "t-fail", stderr=err)
        assert proc.wait(_WAIT_S) == 1
        err.seek(0)
        text = err.read().decode()
    assert "Traceback" in text
    assert "ValueError: broken on purpose" in text


def test_descriptors_are_closed_except_those_passed_on() -> None:
    kept_r, kept_w = os.pipe()
    dropped_r, dropped_w = os.pipe()

    def report() -> None:
        open_fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
        os.write(kept_w, repr(open_fds).encode())

    try:
        proc = ForkedProcess(report, "t-fds", pass_fds=(kept_w,))
        assert proc.wait(_WAIT_S) == 0
        os.close(kept_w)
        seen = eval(os.read(kept_r, 4096).decode())  # (our own repr of a list)
        assert kept_w in seen
        assert dropped_r not in seen
        assert dropped_w not in seen
        # only the standard three, the passed one and the listing's own descriptor
        assert len(set(seen) - {0, 1, 2, kept_w}) <= 1
        os.close(dropped_w)
        assert os.read(dropped_r, 1) == b""  # (the child's copy of the write end is gone too)
    finally:
        for fd in (kept_r, dropped_r):
            os.close(fd)


def test_it_names_itself_and_can_be_waited_for_with_a_timeout_and_killed() -> None:
    proc = ForkedProcess(lambda: time.sleep(60), "veeksha-test", start_new_session=True)
    try:
        deadline = time.monotonic() + _WAIT_S
        name = ""
        while name != "veeksha-test" and time.monotonic() < deadline:
            with open(f"/proc/{proc.pid}/comm") as comm:
                name = comm.read().strip()
            time.sleep(0.01)
        assert name == "veeksha-test"
        assert os.getsid(proc.pid) == proc.pid  # (start_new_session)
        assert proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(0.05)
    finally:
        proc.kill()
    assert proc.wait(_WAIT_S) == -signal.SIGKILL
    assert proc.poll() == -signal.SIGKILL
    proc.kill()  # (exited: nothing to signal, no error)


def test_exit_handlers_are_its_own_and_the_parents_signal_handlers_are_gone() -> None:
    parent_ran: list[str] = []

    def parent_handler() -> None:  # pragma: no cover - must never run in the child
        parent_ran.append("child")

    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    atexit.register(parent_handler)
    try:

        def child() -> None:
            atexit.register(lambda: sys.stdout.write("own handler ran\n"))
            sys.stdout.write(f"usr1 {signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL}\n")

        proc = ForkedProcess(child, "t-atexit", stdout=subprocess.PIPE)
        assert proc.stdout is not None
        out = proc.stdout.read().decode()
        proc.stdout.close()
        assert proc.wait(_WAIT_S) == 0
    finally:
        atexit.unregister(parent_handler)
        signal.signal(signal.SIGUSR1, previous)
    assert out.splitlines() == ["usr1 True", "own handler ran"]


def test_prepare_says_no_with_a_second_thread_or_when_turned_off(monkeypatch) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not single_threaded()
        assert not prepare([])
    finally:
        stop.set()
        thread.join()
    monkeypatch.setenv("VEEKSHA_FORK", "0")
    assert not prepare([])


@pytest.mark.parametrize(("switch", "expected"), [("1", "True"), ("0", "False")])
def test_prepare_says_yes_in_a_fresh_single_threaded_process(switch: str, expected: str) -> None:
    code = textwrap.dedent(
        """
        from veeksha.cli import set_library_defaults
        set_library_defaults()
        from veeksha.engine.launch import HELPER_MODULES
        from veeksha.forked import prepare
        print(prepare(HELPER_MODULES))
        """
    )
    assert _fresh_python(code, {**os.environ, "VEEKSHA_FORK": switch}) == expected


def test_numpy_and_arrow_leave_one_thread_with_the_library_defaults() -> None:
    # (Arrow's jemalloc starts a background thread on import unless told not to, numpy's
    # OpenBLAS one per core, and a second thread keeps a process from forking: a trace replay
    # imports Arrow before its run)
    code = textwrap.dedent(
        """
        from veeksha.cli import set_library_defaults
        set_library_defaults()
        import numpy, pyarrow, pyarrow.parquet, pyarrow.csv
        from veeksha.forked import single_threaded
        print(single_threaded())
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "JE_ARROW_MALLOC_CONF"}
    assert _fresh_python(code, env) == "True"


def test_two_threads_waiting_for_it_both_get_its_exit_code() -> None:
    # (a run's watch is waited for by its reader thread and by the run's stop)
    proc = ForkedProcess(lambda: (time.sleep(0.2), 5)[1], "t-race")
    codes: list[int] = []
    waiters = [threading.Thread(target=lambda: codes.append(proc.wait(_WAIT_S))) for _ in "ab"]
    for waiter in waiters:
        waiter.start()
    codes.append(proc.wait(_WAIT_S))
    for waiter in waiters:
        waiter.join()
    assert codes == [5, 5, 5]


def _fresh_python(code: str, env: dict[str, str]) -> str:
    """What ``code`` prints in a fresh interpreter (which must exit 0)."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()
