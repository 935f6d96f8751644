"""``veeksha.terminal``: stop signals act as Ctrl-C, and a console that is gone costs nothing."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from veeksha import cli, terminal


@contextlib.contextmanager
def _handlers(**wanted: object) -> Iterator[None]:
    """Set signal handlers for the test (``SIGINT=...``) and put the previous ones back."""
    previous = {name: signal.getsignal(getattr(signal, name)) for name in wanted}
    try:
        for name, handler in wanted.items():
            signal.signal(getattr(signal, name), handler)  # type: ignore[arg-type]
        yield
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)


def _is_dev_null(fd: int) -> bool:
    return os.fstat(fd).st_rdev == os.stat(os.devnull).st_rdev


def test_a_console_whose_reader_left_is_sent_to_dev_null() -> None:
    # `veeksha run ... 2>&1 | tee log`, and the terminal closes, taking tee with it: EPIPE
    read, write = os.pipe()
    os.close(read)
    console = terminal._ConsoleFile(write)
    try:
        assert console.write(b"the report\n") == len(b"the report\n")  # (not BrokenPipeError)
        assert console.gone
        assert _is_dev_null(write)
        assert console.write(b"more") == 4
        assert not console.isatty()
    finally:
        os.close(write)


def test_a_write_error_that_is_not_a_gone_console_is_raised() -> None:
    read, write = os.pipe()
    try:
        with pytest.raises(OSError, match="Bad file descriptor") as raised:
            terminal._ConsoleFile(read).write(b"x")  # (a read end)
        assert raised.value.errno == errno.EBADF
    finally:
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_act_as_ctrl_c_during_a_command(sig: int) -> None:
    defaults = {"SIGTERM": signal.SIG_DFL, "SIGHUP": signal.SIG_DFL}
    with _handlers(SIGINT=signal.default_int_handler, **defaults):
        with terminal.commanding():
            assert signal.SIGHUP in terminal.stop_signals()
            with pytest.raises(KeyboardInterrupt):  # noqa: PT012 (the handler runs after the kill)
                os.kill(os.getpid(), sig)
                signal.getsignal(sig)  # (by the next bytecode at the latest)
        assert signal.getsignal(sig) == signal.SIG_DFL  # put back


def test_a_hangup_ignored_when_the_command_starts_stays_ignored() -> None:
    # `nohup veeksha run ...`: the terminal may close, the run goes on
    with _handlers(SIGHUP=signal.SIG_IGN), terminal.commanding():
        assert signal.SIGHUP not in terminal.stop_signals()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGHUP)  # (nothing happens)


def test_another_ctrl_c_while_a_stopped_command_ends_keeps_its_exit_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Ctrl-C pressed twice or thrice during the set-up: the last one came while the command
    # said "interrupted", and click turned it into "Aborted!", exit 1
    @click.command()
    def stopped() -> None:
        raise KeyboardInterrupt

    group = cli.LazyGroup(name="g", commands={"stopped": stopped})
    echo = click.echo

    def echo_then_ctrl_c(message: object = None, **kwargs: object) -> None:
        echo(message, **kwargs)  # type: ignore[arg-type]
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(cli.click, "echo", echo_then_ctrl_c)
    with _handlers(SIGINT=signal.default_int_handler):
        result = CliRunner().invoke(group, ["stopped"])
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    assert result.exit_code == 3, result.output
    assert "Aborted" not in result.output
    assert result.output.strip() == "interrupted"
