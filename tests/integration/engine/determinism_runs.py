"""The runs of ``test_determinism.py``: the cases, the traces they replay, and a driver that runs
a list of cases in one process (``python -m tests.integration.engine.determinism_runs``).

Each case is a shipped scenario (``scenarios/``) or a small one written here, shrunk with
``--set`` overrides to a fraction of a second of traffic. The driver runs them one after the
other as ``veeksha run`` runs a scenario (the same set-up, folder and config.yaml: a dry run
through ``veeksha.experiment.point.run_point``; a run against the simulator in a fork of the
driver whose simulator and workers are forked from it, as ``veeksha run`` forks its helpers),
in a process of its own, so each process has its own ``PYTHONHASHSEED``, its own start time
and its own trace caches::

    python -m tests.integration.engine.determinism_runs OUT TRACES dry CASE...
    python -m tests.integration.engine.determinism_runs OUT TRACES sim:2 CASE...   # 2 workers
    python -m tests.integration.engine.determinism_runs OUT TRACES cache CASE...   # no run

(``cache`` reads and checks the cases' traces as a run does before its traffic, which writes
each trace's cache: the runs after it read their traces from the caches.)

``OUT/<case>/`` receives each run's folder; ``TRACES`` is the folder of trace files
(:func:`write_traces`), named ``{traces}`` in the overrides.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = ROOT / "scenarios"
CONTENT = ("trace_recorder.enabled=true", "trace_recorder.include_content=true")
# (a run against the simulator: fast answers, no process scraping its metrics)
FAST_SIM = ("simulator.preset=fast", "server_metrics.enabled=false")


@dataclass(frozen=True)
class Case:
    """One scenario of the matrix.

    ``scenario``: a path under ``scenarios/`` or a key of :data:`INLINE`; ``overrides``: ``--set``
    values (``{traces}`` stands for the trace folder); ``planned``: sessions whose start the
    schedule fixes (a closed loop's first ``target`` sessions, started as the ramp's slots
    open; the later ones start when an earlier one ends, a measured time); None: every session
    (open loop); ``sim``: also run against the built-in simulator; ``drained``: a phase ends
    with a drain, so the phases after it begin at a measured time: starts are compared from
    their phase's first."""

    name: str
    scenario: str
    overrides: tuple[str, ...] = ()
    planned: int | None = None
    sim: bool = True
    drained: bool = False


INLINE = {
    # several clients (weighted), tool calls and validated nodes in a branching graph, gamma
    # arrivals and think times, a shared prefix, zipf and inverse-gaussian lengths
    "clients.yaml": """
seed: 9
clients:
  - {name: small, model: m-small}
  - {name: mid, model: m-mid}
  - {name: big, model: m-big}
traffic_scheduler:
  type: rate
  interval_generator: {type: gamma, arrival_rate: 80, cv: 1.5}
session_generator:
  type: synthetic
  client_selection: {type: weighted, weights: {small: 3, mid: 2, big: 1}}
  session_graph:
    type: branching
    num_layers_generator: {type: uniform, min: 1, max: 3}
    layer_width_generator: {type: uniform, min: 1, max: 3}
    request_wait_generator: {type: gamma, arrival_rate: 100, cv: 0.5}
    tool_probability: 0.3
    tool_latency_generator: {type: poisson, arrival_rate: 200}
    validation: {type: regex, pattern: '^(?!INVALID)'}
    validation_probability: 0.5
  channels:
    - type: text
      body_length_generator: {type: zipf, min: 5, max: 60, theta: 1.2}
      shared_prefix_ratio: 0.5
      shared_prefix_probability: 0.5
  output_spec: {text: {output_length_generator: {type: inverse_gaussian, mean: 8, shape: 20}}}
runtime: {max_sessions: 12, benchmark_timeout: 60}
""",
    # recorded-style agent sessions (DAGs with think times), wrapped into a reshuffled 2nd pass
    "agent_trace.yaml": """
seed: 5
traffic_scheduler: {type: trace, speedup: 100, turn_timing: timestamps}
session_generator:
  type: trace
  trace_file: {traces}/agent_sessions.jsonl
  flavor: timed_synthetic_session
  wrap_mode: true
runtime: {max_sessions: 30, benchmark_timeout: 60}
""",
    # chats of hash-id blocks, closed loop over the trace's sessions in file order
    "shared_prefix.yaml": """
seed: 6
traffic_scheduler: {type: concurrent, target_concurrent_sessions: 3, rampup_seconds: 0}
session_generator:
  type: trace
  trace_file: {traces}/shared_prefix.jsonl
  flavor: {type: shared_prefix, block_size: 16}
  wrap_mode: false
runtime: {max_sessions: -1, benchmark_timeout: 60}
""",
}

#: one request log written in every file format a trace may have (same rows)
FORMATS = ("log.csv", "log.tsv", "log.jsonl", "log.json")
for _name in FORMATS:
    INLINE[f"{_name}.yaml"] = f"""
seed: 4
traffic_scheduler: {{type: trace, speedup: 20, turn_timing: timestamps}}
session_generator:
  {{type: trace, trace_file: '{{traces}}/{_name}', flavor: request_log, wrap_mode: false}}
runtime: {{max_sessions: -1, benchmark_timeout: 60}}
"""

#: the sweep of test_determinism (its points, each also a case of its own: ``sweep_<rate>``)
SWEEP_RATES = (25, 30, 35)
SWEEP = """
seed: 21
traffic_scheduler:
  type: rate
  interval_generator: {{type: poisson, arrival_rate: {rate}}}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {{type: uniform, min: 1, max: 3}}
    request_wait_generator: {{type: fixed, interval: 0.01}}
  channels: [{{type: text, body_length_generator: {{type: uniform, min: 5, max: 40}}}}]
  output_spec: {{text: {{output_length_generator: {{type: uniform, min: 1, max: 6}}}}}}
runtime: {{max_sessions: 25, benchmark_timeout: 60}}
trace_recorder: {{include_content: true}}
"""
for _rate in SWEEP_RATES:
    INLINE[f"sweep_{_rate}.yaml"] = SWEEP.format(rate=_rate)


CASES = [
    Case(
        "quickstart",  # poisson arrivals, single requests
        "quickstart.yaml",
        ("runtime.max_sessions=12", "traffic_scheduler.interval_generator.arrival_rate=60"),
    ),
    Case(
        "chat",  # gamma arrivals, linear chats with history, zipf/inverse-gaussian lengths
        "chat_multiturn.yaml",
        (
            "runtime.max_sessions=10",
            "traffic_scheduler.interval_generator.arrival_rate=50",
            "session_generator.session_graph.request_wait_generator.arrival_rate=40",
        ),
    ),
    Case(
        "agentic",  # branching DAGs (fan-out, fan-in, skips), fixed think times
        "agentic_branching.yaml",
        (
            "runtime.max_sessions=8",
            "traffic_scheduler.interval_generator.arrival_rate=40",
            "session_generator.session_graph.request_wait_generator.interval=0.02",
        ),
    ),
    Case(
        "concurrency",  # closed loop with a ramp-up, fixed_stair turns; 8 slots open on time
        "concurrency_rampup.yaml",
        (
            "runtime.max_sessions=12",
            "traffic_scheduler.rampup_seconds=0.1",
            "session_generator.session_graph.num_request_generator.values=[2, 3, 4]",
            "session_generator.session_graph.request_wait_generator.interval=0.3",
        ),
        planned=8,  # (no session ends before the last slot opens: each thinks 0.3 s)
    ),
    Case(
        "prefix_cache",  # fixed arrival gaps, a global shared prefix, the completions API
        "prefix_cache.yaml",
        (
            "runtime.max_sessions=12",
            "traffic_scheduler.interval_generator.interval=0.02",
            "session_generator.session_graph.request_wait_generator.arrival_rate=40",
        ),
    ),
    Case(
        "rate_ramp",  # a linearly ramped open-loop rate
        "rate_ramp.yaml",
        (
            "runtime.benchmark_timeout=0.5",
            "traffic_scheduler.interval_generator.arrival_rate=20",
            "traffic_scheduler.ramp.end_rate=100",
            "traffic_scheduler.ramp.duration=0.5",
        ),
    ),
    Case(
        "phases",  # a warmup then three rates, by duration
        "phases.yaml",
        (
            "phases.0.duration=0.1",
            "phases.1.duration=0.15",
            "phases.1.arrival_rate=40",
            "phases.2.duration=0.15",
            "phases.2.arrival_rate=80",
            "phases.3.duration=0.15",
            "phases.3.arrival_rate=160",
        ),
    ),
    Case(
        "phases_drain",  # the same, its first load step drained before the next begins
        "phases.yaml",
        (
            "phases.0.duration=0.1",
            "phases.1.duration=0.15",
            "phases.1.arrival_rate=40",
            "phases.1.drain=true",
            "phases.2.duration=0.15",
            "phases.2.arrival_rate=80",
            "phases.3.duration=null",
            "phases.3.max_sessions=10",
            "phases.3.arrival_rate=160",
        ),
        drained=True,
    ),
    Case(
        "debate",  # agent rounds, two clients, a tool agent, a validated moderator
        "multi_agent_debate.yaml",
        (
            "runtime.max_sessions=5",
            "session_generator.session_graph.rounds=2",
            # (the simulator's invalid answers would add re-prompts: answers, not the schedule)
            "simulator.models.debate-big.faults.invalid_answer_probability=0",
        ),
        planned=4,
    ),
    Case(
        "vision",  # chats opening with images (count, widths, heights drawn), every turn re-sent
        "vision_chat.yaml",
        (
            "runtime.max_sessions=10",
            "traffic_scheduler.interval_generator.arrival_rate=50",
            "session_generator.session_graph.request_wait_generator.arrival_rate=40",
            "simulator.preset=fast",
        ),
    ),
    Case(
        "request_log",  # a request log with chats, each turn held to its own timestamp
        "trace_replay.yaml",
        (
            "session_generator.trace_file={traces}/request_log.csv",
            "traffic_scheduler.speedup=50",
            "traffic_scheduler.max_duration=15",
            "traffic_scheduler.turn_timing=timestamps",
        ),
    ),
    Case("agent_trace", "agent_trace.yaml"),
    Case(
        "azure",
        "traces/azure_llm.yaml",
        ("session_generator.trace_file={traces}/azure_llm.csv", "traffic_scheduler.speedup=30"),
    ),
    Case(
        "burstgpt",
        "traces/burstgpt.yaml",
        ("session_generator.trace_file={traces}/burstgpt.csv", "traffic_scheduler.speedup=30"),
    ),
    Case(
        "mooncake",
        "traces/mooncake.yaml",
        (
            "session_generator.trace_file={traces}/mooncake_trace.jsonl",
            "traffic_scheduler.speedup=30",
        ),
    ),
    Case(
        "rag",
        "traces/rag.yaml",
        ("session_generator.trace_file={traces}/rag.csv", "traffic_scheduler.speedup=30"),
    ),
    Case(
        "sharegpt",  # a chat dataset's own text, wrapped (reshuffled) past its 12 conversations
        "traces/sharegpt.yaml",
        (
            "session_generator.trace_file={traces}/sharegpt.json",
            "traffic_scheduler.interval_generator.arrival_rate=80",
            "session_generator.wrap_mode=true",
            "runtime.max_sessions=16",
        ),
    ),
    Case("clients", "clients.yaml"),
    Case("shared_prefix", "shared_prefix.yaml", planned=3),
    *(Case(f"format_{name}", f"{name}.yaml", sim=False) for name in FORMATS),
    *(Case(f"sweep_{rate}", f"sweep_{rate}.yaml", sim=False) for rate in SWEEP_RATES),
]
BY_NAME = {case.name: case for case in CASES}


def write_traces(folder: Path) -> None:
    """The shipped traces and the small ones built here, into ``folder`` (its own caches)."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in (SCENARIOS / "traces").iterdir():
        if path.suffix in {".csv", ".jsonl", ".json"}:
            shutil.copyfile(path, folder / path.name)
    chats = [  # two chats and a one-turn session over shared 16-token blocks
        ("a", 40, None, [0, 1, 2]),
        ("b", 30, None, [0, 1]),
        ("a", 60, 9, [0, 1, 2, 3]),
        ("c", 20, None, [0, 4]),
        ("b", 45, 7, [0, 1, 5]),
        ("a", 75, 4, [0, 1, 2, 3, 6]),
    ]
    lines = []
    for sid, length, new, ids in chats:
        row = {"session_id": sid, "input_length": length, "output_length": 3, "hash_ids": ids}
        if new is not None:
            row["new_input_length"] = new
        lines.append(json.dumps(row))
    (folder / "shared_prefix.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = []  # a request log: chats and single requests, ties in time included
    for i in range(30):
        session = f"s{i % 7}" if i % 3 else f"one-{i}"
        at = round(0.012 * (i - (i % 4 == 1)), 3)  # (i = 4k + 1 ties with the row before)
        rows.append((at, session, 5 + 7 * i % 50, 1 + i % 6))
    header = ("timestamp", "session_id", "input_length", "output_length")
    csv_lines = [",".join(header), *(",".join(map(str, row)) for row in rows)]
    # Excel's CSV: a byte order mark and CRLF line ends
    (folder / "log.csv").write_bytes(("\ufeff" + "\r\n".join(csv_lines) + "\r\n").encode())
    tsv = ["\t".join(header), *("\t".join(map(str, row)) for row in rows)]
    (folder / "log.tsv").write_text("\n".join(tsv) + "\n", encoding="utf-8")
    objects = [dict(zip(header, row, strict=True)) for row in rows]
    jsonl = "\n".join(json.dumps(o) for o in objects) + "\n"
    (folder / "log.jsonl").write_text(jsonl, encoding="utf-8")
    (folder / "log.json").write_text(json.dumps(objects, indent=1), encoding="utf-8")


def scenario_file(case: Case, folder: Path) -> Path:
    """The case's scenario file: shipped, or written into ``folder``."""
    if case.scenario in INLINE:
        path = folder / case.scenario
        path.write_text(INLINE[case.scenario], encoding="utf-8")
        return path
    return SCENARIOS / case.scenario


def overrides(case: Case, traces: Path, workers: int | None) -> list[str]:
    """The case's ``--set`` values for a run (``workers``: a run against the simulator)."""
    values = [*CONTENT, *FAST_SIM, *(v.replace("{traces}", str(traces)) for v in case.overrides)]
    if workers is not None:
        values.append(f"runtime.num_workers={workers}")
    return values


def run_cases(out: Path, traces: Path, mode: str, names: list[str]) -> int:
    """Run the named cases into ``out/<name>``; the worst exit code.

    A dry run answers in this process. A run against the simulator runs in a fork of this
    process, as ``veeksha run`` runs one scenario: its simulator and workers forked from it
    (``veeksha.engine.launch``), not fresh interpreters (``run_point``'s, a sweep's points:
    ~0.15 CPU-s each, 57 of them between C and D); this process only imports what they need
    and forks, so each case's process can fork its helpers (one thread, no Arrow pool yet)."""
    from veeksha.cli import set_library_defaults

    set_library_defaults()  # (as `veeksha run`: no BLAS threads, which would forbid the forks)
    fork = mode not in ("dry", "cache") and _can_fork()
    worst = 0
    for name in names:
        case = BY_NAME[name]
        if fork:
            from veeksha.forked import ForkedProcess

            child = ForkedProcess(lambda case=case: _run_case(out, traces, mode, case), name)
            code = child.wait()
        else:
            code = _run_case(out, traces, mode, case)
        if code not in (0, 4, 5):  # (health or SLO verdicts are no concern here)
            print(f"{name}: exit {code}", file=sys.stderr)
            worst = max(worst, code)
    return worst


def _can_fork() -> bool:
    """Import what a case's process and its helpers need (once, here: a fork keeps them); say
    whether this process can still fork them (one thread)."""
    from veeksha.engine.launch import HELPER_MODULES
    from veeksha.forked import prepare

    return prepare([*HELPER_MODULES, *_RUN_MODULES])


#: what a run against the simulator imports: once, in the process the cases are forked from
_RUN_MODULES = (
    "veeksha.scenario.loader",
    "veeksha.engine.run",
    "veeksha.record.run_folder",
    "veeksha.evaluate.run",
    "veeksha.generate.traces",
)


def _run_case(out: Path, traces: Path, mode: str, case: Case) -> int:
    """One case into ``out/<name>``: its exit code (0 for ``cache``)."""
    from veeksha.scenario.loader import load_scenario

    dry = mode in ("dry", "cache")
    workers = None if dry else int(mode.partition(":")[2] or 1)
    folder = out / case.name
    folder.mkdir(parents=True, exist_ok=True)
    text = scenario_file(case, folder).read_text(encoding="utf-8")
    text = text.replace("{traces}", str(traces))  # (inline scenarios name the folder too)
    source = folder / "scenario.yaml"
    source.write_text(text, encoding="utf-8")
    scenario = load_scenario(source, overrides(case, traces, workers))
    if mode == "cache":
        if scenario.session_generator.type == "trace":
            from veeksha.generate.traces import open_trace

            open_trace(scenario)
        return 0
    if dry:
        from veeksha.experiment.point import run_point

        result = run_point(scenario, run_dir=folder / "run", quiet=True, plots=False, dry_run=True)
        return result.exit_code
    from veeksha.engine.launch import launch_helpers
    from veeksha.engine.run import exit_code_for, run_scenario
    from veeksha.record.run_folder import write_config

    # (first, as `veeksha run` does: before the run's own threads, if any, begin)
    helpers = launch_helpers(scenario, dry_run=False)
    try:
        run_dir = folder / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        write_config(run_dir, scenario)
        outcome = run_scenario(
            scenario,
            run_dir,
            quiet=True,
            plots=False,
            simulator=helpers.simulator,
            workers=helpers.workers,
            watch_process=helpers.watch,
        )
    finally:
        helpers.close()
    return exit_code_for(outcome, scenario)


if __name__ == "__main__":
    sys.exit(run_cases(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4:]))
