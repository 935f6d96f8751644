"""What each process of a run loads when it starts: the traffic's modules, not the evaluation's
heavy libraries (start-up CPU is a tracked figure: ``python -m benchmarks imports startup``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from veeksha.scenario.simulator import SimulatorConfig

_SCENARIO = """
traffic_scheduler:
  type: rate
  interval_generator: {type: poisson, arrival_rate: 50}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
runtime: {max_sessions: 8, benchmark_timeout: 20}
"""

_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.MULTILINE)


def _fresh_modules(code: str) -> set[str]:
    """Modules a fresh interpreter has loaded after running ``code``."""
    probe = code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(done.stdout.splitlines()[-1].split())


def test_a_quiet_run_without_plots_never_imports_pandas_matplotlib_rich_or_compute(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(_SCENARIO)
    # every process of the tree that writes to the run's stderr (main, workers) lists its imports
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    command = [sys.executable, "-m", "veeksha.cli", "run", str(scenario), "-q", "--no-plots"]
    proc = subprocess.run(
        [*command, "--output-dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode in (0, 4), proc.stderr[-3000:]
    imported = set(_IMPORTED.findall(proc.stderr))
    # (the worker runs as __main__: its HTTP client is what only a worker imports)
    assert {"veeksha.engine.run", "veeksha.dispatch.http1", "pyarrow"} <= imported
    # (8 poisson sessions: the arrival check's KS test runs, without scipy)
    assert "veeksha.evaluate.ks" in imported
    tops = {name.split(".")[0] for name in imported}
    assert not tops & {
        "pandas",
        "matplotlib",
        "scipy",
        "rich",
        "ray",
    }  # (rich: only a report, a live line; ray: only a run with --ray)
    assert not any(name.startswith("veeksha.distributed") for name in imported)
    # the evaluation calls Arrow's kernels by name and its own quantiles (veeksha.record.kernels,
    # veeksha.evaluate.stats): neither pyarrow.compute's 286 wrappers nor numpy.ma are loaded
    assert not imported & {"pyarrow.compute", "numpy.ma", "pandas"}
    assert "veeksha.evaluate.run" in imported
    # (pydantic's plugin loader stood in for: its entry-point scan is off anyway)
    assert "importlib.metadata" not in imported
    # (numpy.typing only for the type checker: importing it builds its docstrings, ~16 ms)
    assert "numpy.typing" not in imported


def test_the_engine_and_a_synthetic_run_s_set_up_load_no_evaluation() -> None:
    # what the main process has loaded by t0: the engine, the scenario, the sessions' source,
    # the Parquet writer's conversion code; the evaluation (Arrow's compute functions) and
    # the trace reader come after the traffic, or never
    loaded = _fresh_modules(
        "import tempfile\n"
        "from veeksha.cli import set_library_defaults\n"
        "set_library_defaults()\n"
        "from veeksha.engine.run import run_benchmark\n"
        "from veeksha.generate.sessions import SessionGenerator\n"
        "from veeksha.generate.tokenizer import BuiltinTokenizer\n"
        "from veeksha.record.rows import warm_up\n"
        "from veeksha.scenario.loader import load_scenario\n"
        "with tempfile.NamedTemporaryFile('w', suffix='.yaml') as f:\n"
        f"    f.write({_SCENARIO!r}); f.flush()\n"
        "    scenario = load_scenario(f.name)\n"
        "SessionGenerator(scenario, BuiltinTokenizer()).session(0)\n"
        "warm_up()\n"
    )
    assert {"veeksha.engine.run", "veeksha.generate.content", "pyarrow.parquet"} <= loaded
    heavy = {"pyarrow.compute", "psutil", "veeksha.engine.prompt_check", "veeksha.evaluate.run"}
    heavy |= {"veeksha.evaluate.source", "veeksha.generate.traces", "pandas", "rich"}
    heavy.add("numpy.typing")  # (for the type checker only: ~16 ms of docstrings to import)
    assert not loaded & heavy


def test_a_worker_starts_without_numpy_arrow_or_the_scenario_models() -> None:
    loaded = _fresh_modules("import veeksha.dispatch.worker")
    assert "veeksha.dispatch.worker" in loaded
    heavy = {"numpy", "pyarrow", "pydantic", "pandas", "rich", "veeksha.scenario.models"}
    assert not loaded & heavy


def test_the_simulator_starts_without_numpy_arrow_pydantic_or_the_scenario_models() -> None:
    # as ``SimulatorProcess`` starts it: the validated settings' JSON, read without pydantic
    settings = SimulatorConfig(processes=1).model_dump_json()
    loaded = _fresh_modules(
        "from veeksha.cli import set_library_defaults\n"
        "set_library_defaults()  # (as python -m veeksha.simulator does first)\n"
        "import veeksha.simulator.cli, veeksha.simulator.runner\n"
        "from veeksha.simulator.settings import SimSettings\n"
        f"SimSettings.from_json({settings!r})\n"
    )
    assert "veeksha.simulator.server" in loaded
    heavy = {"numpy", "pyarrow", "pandas", "rich", "multiprocessing", "veeksha.scenario.models"}
    heavy |= {"pydantic", "veeksha.scenario.simulator", "http.client"}
    heavy.add("importlib.metadata")  # (pydantic's plugin loader stood in for)
    assert not loaded & heavy


def test_the_server_watch_scrapes_without_arrow_numpy_msgspec_or_prometheus_init() -> None:
    loaded = _fresh_modules(
        "import veeksha.server.watch_process as w\n"
        "w._load_parser()\n"
        "import veeksha.server.scraper\n"
        "from veeksha.server.scraper import parse_metrics\n"
        "assert parse_metrics('# TYPE x gauge\\nx 1\\n')[0][0] == 'x'\n"
    )
    assert {"prometheus_client.parser", "veeksha.server.scraper"} <= loaded
    # (prometheus_client's __init__ would load its exposition, HTTP server and registry)
    heavy = {"numpy", "pyarrow", "msgspec", "pydantic", "prometheus_client.exposition"}
    assert not loaded & heavy
