"""The input fuzzer's fixed sample (tests/input_fuzz.py): mutants of every scenario, search file,
microbenchmark config and YAML example of the docs, each validated through ``veeksha``'s own
command in-process, and judged by the standard for bad input (exit 0 or 2, one line per problem
naming the file, its line and the key, no traceback, no pydantic or Python internals). A
subprocess gives the real exit codes of a few, and a valid mutant's dry run. The whole run is
``python -m tests.input_fuzz`` (docs/development.md)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from tests import input_fuzz as fuzz

#: Mutants checked on every test run: every mutation class, spread over the seeds.
SAMPLE_SIZE = 240


@pytest.fixture(scope="module")
def every_mutant() -> list[fuzz.Mutant]:
    return fuzz.all_mutants()


def test_the_fuzzer_finds_its_seeds_and_every_mutation(every_mutant: list[fuzz.Mutant]) -> None:
    """A renamed scenario folder or docs fence would leave the fuzzer nothing to mutate."""
    kinds = collections.Counter(seed.kind for seed in fuzz.seeds())
    assert kinds["scenario"] >= 30
    assert kinds["decode"] >= 1
    assert kinds["stress"] >= 1
    classes = collections.Counter(mutant.cls for mutant in every_mutant)
    expected = {
        "seed", "drop", "wrong_type", "number", "empty", "enum", "unknown_key", "odd_key",
        "duplicate_key", "syntax", "expand", "tag", "include", "bytes", "root", "anchor", "shape",
        "path", "pair",
    }  # fmt: skip
    assert expected <= set(classes), expected - set(classes)
    assert len(every_mutant) > 15_000
    # deterministic: the same mutants, in the same order, every time
    again = fuzz.all_mutants()
    assert [m.mutation for m in again[:500]] == [m.mutation for m in every_mutant[:500]]


def test_a_sample_of_mutants_meets_the_standard_for_bad_input(
    every_mutant: list[fuzz.Mutant], tmp_path: Path
) -> None:
    sample = fuzz.sample(every_mutant, SAMPLE_SIZE)
    assert len({m.cls for m in sample}) == len({m.cls for m in every_mutant})
    defects: list[str] = []
    outcomes = collections.Counter()
    for mutant in sample:
        found, outcome, _ = fuzz.check(mutant, tmp_path)
        outcomes[outcome.exit_code] += 1
        defects += [str(d) for d in found]
    assert not defects, "\n".join(defects)
    assert set(outcomes) == {0, 2}  # (both valid and invalid mutants were made)


def test_the_exit_codes_of_a_real_process(every_mutant: list[fuzz.Mutant], tmp_path: Path) -> None:
    """``veeksha validate`` and a dry run as processes: exit 2 for a bad file (its one line),
    0 for a valid mutant's short dry run."""
    bad = next(
        m
        for m in every_mutant
        if m.seed.name == "scenarios/quickstart.yaml" and m.mutation.startswith("syntax: tab")
    )
    line = bad.mutation.split()[-1]
    written = fuzz.write(bad, tmp_path)
    outcome = fuzz.validate_subprocess(written)
    assert outcome.exit_code == 2, outcome.stderr
    assert outcome.stderr.count("\n") == 1
    assert outcome.stderr.startswith(f"{written.path}:{line}:1: YAML syntax error: a tab")
    valid = next(
        m
        for m in every_mutant
        if m.seed.name == "scenarios/quickstart.yaml" and m.mutation.startswith("drop: seed")
    )
    folder = tmp_path / "valid"
    folder.mkdir()
    written = fuzz.write(valid, folder)
    done = fuzz.dry_run_subprocess(written)
    assert fuzz.judge_dry_run(valid, done) == []
    assert done.exit_code == 0, done.stderr


# ---------------------------------------------------------- the oracle finds what it looks for


def _judged(stderr: str, exit_code: int = 2, exception: str = "") -> list[str]:
    seed = fuzz.Seed("s.yaml", "scenario", "seed: 1\n")
    mutant = fuzz.Mutant(seed, "wrong_type: seed -> str", "seed: x\n")
    written = fuzz.Written(Path("/f/s.yaml"), Path("/f"))
    outcome = fuzz.Outcome(exit_code, "", stderr, exception)
    return [d.kind for d in fuzz.judge(mutant, written, outcome)]


@pytest.mark.parametrize(
    ("stderr", "exit_code", "exception", "kinds"),
    [
        ("/f/s.yaml:1:7: seed: must be a valid integer (got 'x')\n", 2, "", []),
        ("", 1, "Traceback ...\nTypeError: boom\n", ["crash"]),
        ("/f/s.yaml:1:7: seed: boom\n", 3, "", ["exit_code"]),
        ("", 2, "", ["silent"]),
        ("/f/s.yaml:1:7: seed: Input should be a valid integer (got 'x')\n", 2, "", ["internals"]),
        ("/f/s.yaml:1:7: seed: unknown type 'None'\n", 2, "", ["internals"]),
        ("/f/s.yaml:1:7: seed: unknown type \"{'a': 1}\"\n", 2, "", ["internals"]),
        ("/f/s.yaml:2:5: YAML syntax error: expected ',' or ']', but got '{'\n", 2, "", []),
        ("/f/s.yaml:1:7: seed: got TaggedScalar(value='x')\n", 2, "", ["internals"]),
        ("/f/s.yaml: YAML error: while parsing\n  in <unicode string>\n", 2, "", ["no_line"] * 1),
        ("error: somewhere.csv: cannot read the trace\n", 2, "", ["no_file"]),
        ("/f/s.yaml:1:7: must be a valid integer (got 'x')\n", 2, "", ["no_key"]),
    ],
)
def test_the_oracle_names_each_defect(
    stderr: str, exit_code: int, exception: str, kinds: list[str]
) -> None:
    found = _judged(stderr, exit_code, exception)
    assert found[: len(kinds)] == kinds
    assert bool(found) == bool(kinds)
