"""The light paced server (``paced_server.c``): built, started and measured for the figures.

A measuring instrument, not part of veeksha: a single-threaded C server that paces an SSE
completion exactly (first content chunk TTFT after the request's last byte was read, then one
every ITL) and reports when it wrote each chunk, as the built-in simulator does with
``record_chunk_times``. It needs 25-35 % of a core at 128 streams (~22,000 writes/s, most of
it the kernel's loopback path inside each ``send``) where the simulator (Python) needs 60-80 %
and reads its requests late, so a figure measured against it shows the client's delays.

``build()`` compiles it with ``gcc -O2`` (``$CC`` if set) into ``~/.cache/veeksha-bench/``
(``$XDG_CACHE_HOME`` honoured), named by the source's hash, so an edit rebuilds it; None and a
reason when there is no compiler. ``PacedServer`` has the ``Simulator`` interface the figures
use (``base_url``, ``cpu_s``, ``_procs``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import psutil

from benchmarks.harness import processes_cpu_s

__all__ = ["SOURCE", "PacedServer", "build"]

SOURCE = Path(__file__).resolve().parent / "paced_server.c"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "veeksha-bench"


def build() -> tuple[Path | None, str]:
    """The compiled server (built if its source changed), or None and why not."""
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    binary = _cache_dir() / f"paced_server-{digest}"
    if binary.exists():
        return binary, ""
    if not compiler:
        return None, "no C compiler (gcc or $CC) found"
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_suffix(f".tmp{os.getpid()}")
    try:
        out = subprocess.run(
            [compiler, "-O2", "-o", str(tmp), str(SOURCE)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{compiler} could not be run: {exc}"
    if out.returncode != 0:
        tmp.unlink(missing_ok=True)
        return None, f"{compiler} failed on {SOURCE.name}: {out.stderr.strip()[-500:]}"
    tmp.replace(binary)
    return binary, ""


class PacedServer:
    """``paced_server`` in its own process on a free loopback port."""

    def __init__(self, binary: Path, ttft_ms: float, itl_ms: float, tokens: int) -> None:
        self._cmd = [str(binary), "-t", str(ttft_ms), "-i", str(itl_ms), "-n", str(tokens)]
        self._proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> PacedServer:
        self._proc = subprocess.Popen(
            self._cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "PORT":
            self.__exit__()
            raise RuntimeError(f"paced_server did not print its port (got {line!r})")
        self.base_url = f"http://127.0.0.1:{line[1]}/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def _procs(self) -> list[psutil.Process]:
        if self._proc is None or self._proc.poll() is not None:
            return []
        try:
            return [psutil.Process(self._proc.pid)]
        except psutil.NoSuchProcess:
            return []

    def cpu_s(self) -> float:
        """CPU seconds (user + system) of the server so far."""
        return processes_cpu_s(self._procs())
