"""Every example of README.md and docs/*.md works as written: each ```yaml block loads as
`veeksha validate` loads it (or as the section, config file or included file its first line says
it is), each ```python block compiles, and each `veeksha` command of a ```bash block is accepted
by its command, the scenario or config file it names loaded with its overrides and flags.
Nothing runs. The conventions are in tests/doc_examples.py and docs/development.md; the python
blocks are run against a real run folder in tests/integration/evaluate/test_doc_python.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_examples import (
    PAGES,
    ROOT,
    Block,
    all_blocks,
    check_command,
    check_yaml,
    code_blocks,
    expand_globs,
    shell_commands,
    veeksha_commands,
)

YAML_BLOCKS = all_blocks("yaml")
PYTHON_BLOCKS = all_blocks("python")
COMMANDS = list(veeksha_commands(all_blocks("bash")))


def _id(value: object) -> str:
    return value.where if isinstance(value, Block) else " ".join(map(str, value))  # type: ignore[call-overload]


def test_the_examples_are_found() -> None:
    """The extraction finds the docs' examples (a renamed fence or page would check nothing)."""
    assert len(PAGES) > 10
    assert len(YAML_BLOCKS) >= 20
    assert len(PYTHON_BLOCKS) >= 5
    assert len(COMMANDS) >= 30


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=_id)
def test_every_yaml_example_loads(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # paths in the examples are relative to a checkout's root
    assert check_yaml(block, code_blocks(block.page, "yaml"), tmp_path) == []


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=_id)
def test_every_python_example_compiles(block: Block) -> None:
    compile(block.text, block.where, "exec")


@pytest.mark.parametrize(("block", "argv"), COMMANDS, ids=_id)
def test_every_veeksha_command_is_accepted(
    block: Block, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    for named in code_blocks(block.page, "yaml"):  # `--config decode.yaml` of the page's block
        if named.name:
            (tmp_path / named.name).write_text(named.text, encoding="utf-8")
    assert check_command(expand_globs(argv), tmp_path) == [], block.where


# ------------------------------------------------------------- the checks find broken examples


def _page(tmp_path: Path, body: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(body, encoding="utf-8")
    return page


def _yaml_problems(tmp_path: Path, body: str) -> list[list[str]]:
    page = _page(tmp_path, body)
    blocks = code_blocks(page, "yaml")
    folder = tmp_path / "blocks"
    folder.mkdir()
    return [check_yaml(block, blocks, folder) for block in blocks]


def test_a_broken_scenario_fails(tmp_path: Path) -> None:
    found = _yaml_problems(
        tmp_path,
        "```yaml\ntraffic_scheduler: {type: rate}\n```\n\n"
        "```yaml\ntraffic_scheduler:\n  type: rate\n  interval_generator: {arival_rate: 2}\n```\n",
    )
    assert found[0] == []
    assert len(found[1]) == 1  # at the page's own line and column
    assert found[1][0] == (
        f"{tmp_path / 'page.md'}:8:24: traffic_scheduler.interval_generator.arival_rate: "
        "unknown key; did you mean 'arrival_rate'?"
    )


def test_a_key_that_is_only_warned_of_fails(tmp_path: Path) -> None:
    (problems,) = _yaml_problems(tmp_path, "```yaml\nruntime: {num_dispatcher_threads: 2}\n```\n")
    assert len(problems) == 1
    assert problems[0].startswith("warning:")


def test_a_fragment_is_checked_in_its_section(tmp_path: Path) -> None:
    good, bad, unmarked = _yaml_problems(
        tmp_path,
        "```yaml\n# fragment of: session_generator\nsession_graph: {type: linear}\n```\n"
        "```yaml\n# fragment of: session_generator\nsession_graph: {type: lienar}\n```\n"
        "```yaml\nsession_graph: {type: linear}\n```\n",
    )
    assert good == []
    assert len(bad) == 1
    assert bad[0].startswith(f"{tmp_path / 'page.md'}:7:")  # the page's line, not the wrapping's
    assert "session_generator.session_graph.type: unknown type 'lienar'" in bad[0]
    assert "session_graph: unknown key" in unmarked[0]


def test_a_named_file_is_checked_through_the_block_including_it(tmp_path: Path) -> None:
    problems = _yaml_problems(
        tmp_path,
        "```yaml\n# client.yaml\nmodel: m\napi_bse: http://h:8000/v1\n```\n"
        "```yaml\n# main.yaml\nclient: !include client.yaml\n"
        "runtime: {max_sessions: !expand [1, 2]}\n```\n",
    )
    assert problems[0] == []  # not a scenario alone
    assert len(problems[1]) == 1
    assert "client.yaml:3:1: client.api_bse: unknown key" in problems[1][0]


def test_a_microbenchmark_config_is_checked_by_its_command(tmp_path: Path) -> None:
    good, bad = _yaml_problems(
        tmp_path,
        "```yaml\n# decode.yaml: veeksha decode --config decode.yaml\nbatch_sizes: [1, 2]\n"
        "simulator: {decode_step_ms: 5}\n```\n"
        "```yaml\n# stress.yaml: veeksha stress --config stress.yaml\nmode: auto\n"
        "max_levle: 8\n```\n",
    )
    assert good == []
    assert bad == [f"{tmp_path / 'page.md'}:9:1: max_levle: unknown key; did you mean 'max_level'?"]


def test_blocks_marked_or_without_keys_are_not_loaded(tmp_path: Path) -> None:
    problems = _yaml_problems(
        tmp_path,
        "```yaml\n# not a scenario: a server's config\nport: 8000\n```\n"
        "```yaml\n# yaml-language-server: $schema=../schemas/scenario.schema.json\n```\n",
    )
    assert problems == [[], []]


def test_shell_commands_are_split_as_the_shell_splits_them(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "```bash\n. .venv/bin/activate && veeksha run a.yaml   # a comment\n"
        "veeksha decode --api_base http://h/v1 \\\n    --batch_sizes 1 2\n```\n",
    )
    (block,) = code_blocks(page, "bash")
    assert shell_commands(block) == [
        [".", ".venv/bin/activate"],
        ["veeksha", "run", "a.yaml"],
        ["veeksha", "decode", "--api_base", "http://h/v1", "--batch_sizes", "1", "2"],
    ]


def test_a_broken_command_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    (tmp_path / "decode.yaml").write_text("batch_sizes: [1]\n", encoding="utf-8")
    assert check_command(["run", "scenarios/quickstart.yaml", "--set", "seed=3"]) == []
    assert check_command(["report", "RUN_DIR", "--quiet"]) == []  # a placeholder folder
    assert check_command(["decode", "--config", "decode.yaml", "--quick"], tmp_path) == []
    stale_key = check_command(
        ["run", "scenarios/quickstart.yaml", "--set", "runtime.max_sesions=3"]
    )
    assert len(stale_key) == 1
    assert "runtime.max_sesions: unknown key" in stale_key[0]
    pair = check_command(["benchmark", "--config", "scenarios/quickstart.yaml", "--sed", "3"])
    assert "sed: unknown key" in pair[0]
    assert check_command(["report", "RUN_DIR", "--no-plot"]) == [
        "No such option '--no-plot'. Did you mean '--no-plots'?"
    ]
    assert check_command(["sim-server", "--preset", "slow"])[0].startswith("Invalid value")
    assert check_command(["decode", "--batch_size", "4"])[0].startswith("--batch_size: unknown")
    assert check_command(["decode", "--config", "decode.yaml", "--output_lenght", "8"], tmp_path)
    assert check_command(["bench"]) == ["no command 'bench'"]
    assert check_command(["compare", "A", "B", "[--plot", "P]"])[0].startswith("a synopsis")
    assert check_command(["stress", "--input_lengths", "[128, 256]"])[0].startswith("--input_len")
    assert expand_globs(["validate", "scenarios/quick*.yaml"]) == [
        "validate",
        "scenarios/quickstart.yaml",
    ]
