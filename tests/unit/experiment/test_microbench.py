"""The microbenchmarks' pure parts: flags, settings, the decode window, the checks, the fit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from veeksha.errors import ScenarioError
from veeksha.experiment.microbench.config import (
    DecodeConfig,
    PrefillConfig,
    load_config,
    parse_flags,
)
from veeksha.experiment.microbench.decode import DecodeWindow, _fcfs_inversions, analyse_decode
from veeksha.experiment.microbench.points import PointSpec, point_scenario, serving
from veeksha.experiment.microbench.prefill import analyse_prefill
from veeksha.experiment.microbench.results import fit_line
from veeksha.experiment.microbench.stress_config import StressConfig
from veeksha.experiment.point import PointResult

HEALTHY = {"health": {"verdict": "PASS"}}


def test_flags_read_as_the_public_cli_writes_them() -> None:
    flags = parse_flags(
        [
            "--input_lengths",
            "128",
            "256",
            "--quick",
            "--no_plots",
            "--simulator.seed=3",
            "--model",
            "m",
        ]
    )
    assert flags == {
        "input_lengths": ["128", "256"],
        "quick": True,
        "plots": False,
        "simulator": {"seed": "3"},
        "model": "m",
    }
    assert parse_flags(["--batch-sizes", "8"]) == {"batch_sizes": "8"}
    # a list written as in the --config file
    assert parse_flags(["--input_lengths", "[128, 256]"]) == {"input_lengths": ["128", "256"]}
    assert parse_flags(["--input_lengths=[128]"]) == {"input_lengths": ["128"]}


def test_quick_fills_only_the_keys_left_unset(tmp_path: Path) -> None:
    quick = load_config(PrefillConfig, None, {"quick": True})
    assert quick.input_lengths == [128, 512, 1024]
    assert quick.samples_per_length == 3
    full = load_config(PrefillConfig, None, {})
    assert full.input_lengths == [128, 256, 512, 1024]
    assert full.simulator.preset == "realistic"
    path = tmp_path / "d.yaml"
    path.write_text("quick: true\nbatch_sizes: [2, 8]\nsimulator: {decode_step_ms: 3}\n")
    decode = load_config(DecodeConfig, path, {"batch_sizes": "4", "simulator": {"seed": "1"}})
    assert decode.batch_sizes == [4]  # a flag wins over the file
    assert decode.output_length == 64  # --quick's
    assert (decode.simulator.decode_step_ms, decode.simulator.seed) == (3.0, 1)


def test_a_context_limit_of_an_endpoint_is_only_checked_when_given() -> None:
    endpoint = {"api_base": "http://127.0.0.1:9/v1", "model": "m", "input_lengths": ["500000"]}
    assert load_config(PrefillConfig, None, endpoint).input_lengths == [500000]
    with pytest.raises(ScenarioError, match="exceed the model context of 1000"):
        load_config(PrefillConfig, None, {**endpoint, "max_model_len": "1000"})


@pytest.mark.parametrize(
    ("api_base", "message"),
    [
        ("127.0.0.1:8000/v1", "must be an http:// or https:// URL"),
        ("http://127.0.0.1:99999/v1", "is not a valid URL (Port out of range 0-65535)"),
        ("http://me:hunter2@127.0.0.1:8000/v1", "must not hold credentials"),
        ("http://my host:8000/v1", "has a host that is not one"),
    ],
)
def test_a_bad_api_base_is_named_as_the_flag_or_the_files_key(
    tmp_path: Path, api_base: str, message: str
) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_config(PrefillConfig, None, {"api_base": api_base, "model": "m"})
    (issue,) = caught.value.issues
    assert str(issue).startswith(f"--api_base: {message}"), str(issue)
    assert "client." not in str(issue)  # (never the key of the points' scenario)
    assert "hunter2" not in str(issue)
    assert "api_key_env" not in str(issue)  # (a key the microbenchmarks do not have)
    if "credentials" in message:
        assert "put the key in OPENAI_API_KEY" in str(issue)
    path = tmp_path / "p.yaml"
    path.write_text(f"model: m\napi_base: '{api_base}'\n")
    with pytest.raises(ScenarioError) as caught:
        load_config(PrefillConfig, path, {})
    assert str(caught.value).startswith(f"{path}:2:1: api_base: {message}")


def test_a_boolean_where_a_number_is_expected_is_refused_at_its_key(tmp_path: Path) -> None:
    # Python's bool is an int: seed: true was seed 1; the scenario models' rule refuses it
    path = tmp_path / "d.yaml"
    path.write_text(
        "seed: true\nbatch_sizes: [1, false]\noutput_length: 16\nrequest_timeout: true\n"
        "simulator: {seed: true}\nquick: true\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_config(DecodeConfig, path, {})
    assert sorted(str(issue) for issue in caught.value.issues) == [
        f"{path}:1:1: seed: must be a valid integer, not a boolean (got true)",
        f"{path}:2:18: batch_sizes[1]: must be a valid integer, not a boolean (got false)",
        f"{path}:4:1: request_timeout: must be a valid number, not a boolean (got true)",
        f"{path}:5:13: simulator.seed: must be a valid integer, not a boolean (got true)",
    ]
    stress = tmp_path / "s.yaml"
    stress.write_text("rates: [true, 2]\nmin_samples: true\n")
    with pytest.raises(ScenarioError) as caught:
        load_config(StressConfig, stress, {})
    assert sorted(issue.path for issue in caught.value.issues) == ["min_samples", "rates[0]"]
    assert all("not a boolean" in issue.message for issue in caught.value.issues)
    # a whole number written as one is taken as before; a flag's text too
    path.write_text("seed: 3\noutput_length: 16.0\nquick: true\nplots: false\n")
    loaded = load_config(DecodeConfig, path, {})
    assert (loaded.seed, loaded.output_length, loaded.plots) == (3, 16, False)
    assert load_config(PrefillConfig, None, {"seed": "7"}).seed == 7


def test_bad_keys_and_values_read_as_the_scenario_loaders(tmp_path: Path) -> None:
    # an unknown key named its near miss only when difflib found one (samples: nothing), a bad
    # list item was placed at its key's column 1, and values were worded as pydantic's "Input
    # should be a valid integer, unable to parse string as an integer"
    path = tmp_path / "p.yaml"
    path.write_text(
        "samples: 5\ninput_lengths: [128, abc]\nrequest_timeout: -1\nsimulator: 3\n"
        "num_workers:\n  - 2\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_config(PrefillConfig, path, {})
    assert sorted(str(issue) for issue in caught.value.issues) == [
        f"{path}:1:1: samples: unknown key; did you mean 'samples_per_length'?",
        f"{path}:2:22: input_lengths[1]: must be a valid integer (got 'abc')",
        f"{path}:3:1: request_timeout: must be greater than 0 (got -1)",
        f"{path}:4:1: simulator: must be a mapping (got 3)",
        f"{path}:5:1: num_workers: must be a valid integer",  # (a list: not quoted, as there)
    ]
    block = tmp_path / "d.yaml"
    block.write_text("batch_sizes:\n  - 1\n  - four\nsample_per_length: 3\n")
    with pytest.raises(ScenarioError) as caught:
        load_config(DecodeConfig, block, {})
    assert [str(issue) for issue in caught.value.issues] == [
        f"{block}:3:5: batch_sizes[1]: must be a valid integer (got 'four')",
        f"{block}:4:1: sample_per_length: unknown key; allowed keys: api_base, model, client_type, "
        "tokenizer, output_dir, quick, seed, max_model_len, num_workers, request_timeout, "
        "ready_timeout, plots, point_plots, simulator, headers, input_lengths, batch_sizes, "
        "output_length",
    ]
    # a flag's: named as the flag, its item by its index
    with pytest.raises(ScenarioError) as caught:
        load_config(StressConfig, None, {"rates": ["1", "x"], "mode": "foo"})
    assert sorted(str(issue) for issue in caught.value.issues) == [
        "--mode: must be 'manual', 'range' or 'auto' (got 'foo')",
        "--rates[1]: must be a valid number (got 'x')",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a YAML error was ruamel's report over several lines ("in "<unicode string>", ...")
        ("batch_sizes: [1, 2\x00]\n", ":1:19: YAML syntax error: the character #x0000 is not"),
        (
            "batch_sizes: [1]\nbatch_sizes: [2]\n",
            ":2:1: YAML syntax error: duplicate key 'batch_sizes' in the mapping that starts at",
        ),
        # a tag was validated as a value: a crash (!expand of a list) or its Python repr
        ("batch_sizes: !expand [[1, 2], [4]]\n", ":1:14: !expand: a microbenchmark's config"),
        ("output_length: !nonsense 4\n", ":1:16: !nonsense (veeksha knows !expand and"),
        # a key that is not text was read as its str() and placed at no line
        ("seed: 1\n3: 4\n", ":2:1: 3: a key is a name, and this one is a number"),
        ("- 1\n", ":1:1: expected a mapping of keys"),
        (b"seed: 1 # caf\xe9\n", ":1:14: not a text file in UTF-8 (byte 0xe9"),
    ],
)
def test_a_config_file_that_is_not_plain_yaml_is_one_line_at_its_place(
    tmp_path: Path, text: str | bytes, expected: str
) -> None:
    path = tmp_path / "d.yaml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    with pytest.raises(ScenarioError) as caught:
        load_config(DecodeConfig, path, {})
    (issue,) = caught.value.issues
    assert str(issue).startswith(f"{path}{expected}"), str(issue)
    assert "\n" not in str(issue)


def test_points_differ_in_seed_and_run_one_batch_at_once() -> None:
    config = load_config(DecodeConfig, None, {"quick": True})
    scenario = point_scenario(config, PointSpec(2, 128, 64, 16, 16))
    assert scenario.seed == config.seed + 2
    assert scenario.traffic_scheduler.target_concurrent_sessions == 16  # type: ignore[union-attr]
    assert scenario.traffic_scheduler.rampup_seconds == 0  # type: ignore[union-attr]
    assert scenario.runtime.max_sessions == 16


def test_image_sides_make_a_point_a_side_at_one_text_length() -> None:
    from veeksha.experiment.microbench.prefill import prefill_specs

    config = load_config(PrefillConfig, None, {"quick": True, "image_sides": ["224", "448"]})
    assert config.input_lengths == [32]  # (not --quick's ladder of lengths)
    specs = prefill_specs(config)
    assert [(s.image_side, s.input_length) for s in specs] == [(224, 32), (448, 32)]
    scenario = point_scenario(config, specs[1])
    generator = scenario.session_generator
    (image,) = [c for c in generator.channels if c.type == "image"]  # type: ignore[union-attr]
    assert (image.width_generator.value, image.height_generator.value) == (448, 448)  # type: ignore[union-attr]
    plain = point_scenario(config, PointSpec(0, 32, 1, 1, 3))
    assert [c.type for c in plain.session_generator.channels] == ["text"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"image_sides": ["0"]}, "image_sides: every side must be 1 to 16384 pixels"),
        ({"image_sides": ["20000"]}, "image_sides: every side must be 1 to 16384 pixels"),
        (
            {"image_sides": ["224"], "input_lengths": ["16", "32"]},
            "input_lengths: with image_sides, give one length",
        ),
        (
            {"image_sides": ["224"], "client_type": "openai_completions"},
            "images go in chat messages",
        ),
    ],
)
def test_image_sides_are_checked(given: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_config(PrefillConfig, None, {"quick": True, **given})
    assert message in str(caught.value)


def test_the_decode_window_holds_only_the_gaps_where_all_decode() -> None:
    # request a: chunks every 10 ms from 0; b joins at 25 ms; a ends at 90 ms, b at 125 ms
    a = np.arange(0, 100, 10, dtype=float) / 1000
    b = np.arange(25, 130, 10, dtype=float) / 1000
    window = DecodeWindow([a, b])
    assert (window.start, window.end) == (0.025, 0.09)
    # a: 30..90 → 6 gaps; b: 25..85 → 6 gaps
    assert window.min_gaps == 6
    assert np.allclose(window.gaps_s, 0.01)
    late = DecodeWindow([a, a + 0.2])  # the second starts after the first ended
    assert late.length_s < 0
    assert late.min_gaps == 0


def test_fcfs_allows_ties_within_a_step_but_not_inversions() -> None:
    rows = pd.DataFrame({"sent_at": [0.0, 0.001, 0.002], "first_chunk_at": [0.010, 0.0301, 0.030]})
    assert _fcfs_inversions(rows, tolerance_s=0.001) == 0  # same step, read in another order
    rows.loc[2, "first_chunk_at"] = 0.005
    assert _fcfs_inversions(rows, tolerance_s=0.001) == 2


def _prefill_rows(length: int, ttfc_s: list[float], **overrides: object) -> pd.DataFrame:
    sent = np.arange(len(ttfc_s), dtype=float)
    rows = pd.DataFrame(
        {
            "status": "ok",
            "sent_at": sent,
            "completed_at": sent + np.array(ttfc_s),
            "ttfc": ttfc_s,
            "prompt_tokens_total": length,
            "cached_tokens": 0,
        }
    )
    for key, value in overrides.items():
        rows[key] = value
    return rows


def test_prefill_analysis_fits_medians_and_names_each_broken_check(tmp_path: Path) -> None:
    def point(
        i: int, length: int, rows: pd.DataFrame
    ) -> tuple[PointSpec, PointResult, pd.DataFrame]:
        spec = PointSpec(i, length, 1, 1, 3, 1)
        return spec, PointResult(tmp_path / f"p{i}", 0, False, HEALTHY), rows

    truth = [0.005 + 0.05 * n / 1000 for n in (128, 1024)]  # 5 ms + 50 ms per 1k
    good = [
        point(0, 128, _prefill_rows(128, [truth[0], truth[0], 9.0])),  # one outlier: medians
        point(1, 1024, _prefill_rows(1024, [truth[1]] * 3)),
    ]
    table, fit, checks, _ = analyse_prefill(good, tmp_path)
    assert fit is not None
    assert fit["slope_ms_per_1k_tokens"] == pytest.approx(50)
    assert fit["intercept_ms"] == pytest.approx(5)
    assert all(c.passed for c in checks)
    assert table[0]["run_dir"] == "p0"
    overlapping = _prefill_rows(128, [0.5, 2.0, 0.5])  # the second ends after the third starts
    bad = [
        point(0, 128, overlapping),
        point(1, 1024, _prefill_rows(1024, [0.1] * 3, cached_tokens=16, prompt_tokens_total=1030)),
    ]
    _, _, checks, _ = analyse_prefill(bad, tmp_path)
    failed = {c.name: c.detail for c in checks if not c.passed}
    assert set(failed) == {"sequential", "exact_lengths", "no_cache_hits"}
    assert failed["exact_lengths"] == "L=1024: 3 prompts of [1030] tokens"


def test_decode_analysis_fits_tbc_against_batch(tmp_path: Path) -> None:
    points = []
    for i, batch in enumerate((1, 2, 4)):
        step = (5 + 0.5 * batch) / 1000
        times = [np.arange(20) * step + 0.001 * k for k in range(batch)]
        rows = pd.DataFrame(
            {
                "status": "ok",
                "sent_at": [0.0001 * k for k in range(batch)],
                "first_chunk_at": [t[0] for t in times],
                "chunk_times": times,
            }
        )
        spec = PointSpec(i, 128, 20, batch, batch)
        points.append((spec, PointResult(tmp_path / f"p{i}", 0, False, HEALTHY), rows))
    table, fits, checks = analyse_decode(points, tmp_path)
    assert [p["tbc_p50_ms"] for p in table] == pytest.approx([5.5, 6.0, 7.0])
    assert fits[0]["slope_ms_per_seq"] == pytest.approx(0.5)
    assert fits[0]["intercept_ms"] == pytest.approx(5.0)
    assert all(c.passed for c in checks)


def test_a_line_needs_two_distinct_x() -> None:
    assert fit_line([1, 1], [2, 3]) is None
    fit = fit_line([1, 2, 3], [3, 5, 7])
    assert fit is not None
    assert (fit.slope, fit.intercept, fit.r2) == pytest.approx((2, 1, 1))


def test_headers_flags_read_as_yaml_mappings_with_names_as_written() -> None:
    # the natural shell form: single quotes, ${NAME} unquoted (YAML alone reads its braces as
    # a mapping's and refuses the text)
    assert parse_flags(["--headers", "{X-Api-Key: ${MY_KEY}, X-Tenant: 42}"]) == {
        "headers": {"X-Api-Key": "${MY_KEY}", "X-Tenant": 42}
    }
    assert parse_flags(["--headers={Authorization: Token ${A}${B}}"]) == {
        "headers": {"Authorization": "Token ${A}${B}"}
    }
    # a header's name keeps its dashes (they read as underscores in veeksha's own keys)
    assert parse_flags(["--headers.X-Api-Key", "${K}", "--simulator.required-headers.X-Key=v"]) == {
        "headers": {"X-Api-Key": "${K}"},
        "simulator": {"required_headers": {"X-Key": "v"}},
    }
    with pytest.raises(ScenarioError) as caught:
        parse_flags(["--headers", "{X-Api-Key: 'sk-secret-1}"])
    (issue,) = caught.value.issues
    assert str(issue).startswith("--headers: expected a mapping, e.g. '{X-Api-Key: ${MY_KEY}")
    assert "sk-secret" not in str(issue)


def test_headers_are_refused_as_a_scenarios_are_and_a_flag_replaces_the_files_by_name(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("headers:\n  Host: h\n")
    with pytest.raises(ScenarioError) as caught:
        load_config(PrefillConfig, path, {})
    assert [str(issue) for issue in caught.value.issues] == [
        f"{path}:2:3: headers.Host: veeksha sets Host itself: remove it"
    ]
    # a value of the wrong type: never quoted (a header's value may be a credential)
    path.write_text("headers:\n  X-Tenant: a\n  X-Key: true\n")
    with pytest.raises(ScenarioError) as caught:
        load_config(PrefillConfig, path, {})
    assert [str(issue) for issue in caught.value.issues] == [
        f"{path}:3:3: headers.X-Key: must be a valid string (got ***)"
    ]
    path.write_text("headers:\n  X-Tenant: a\n  x-tenant: b\n")
    with pytest.raises(ScenarioError) as caught:
        load_config(PrefillConfig, path, {})
    assert [str(issue) for issue in caught.value.issues] == [
        f"{path}:3:3: headers.x-tenant: given twice ('X-Tenant' and 'x-tenant'): a header "
        "name's case does not matter; keep one"
    ]
    with pytest.raises(ScenarioError) as caught:
        load_config(PrefillConfig, None, parse_flags(["--headers", '{X-Key: "a\\nb"}']))
    assert [str(issue) for issue in caught.value.issues] == [
        "--headers.X-Key: its value holds a line break (CR or LF), which would end the header"
    ]
    # a flag's header replaces the file's of the same name in any case; the others stay
    path.write_text("headers: {X-Api-Key: file, X-Tenant: a}\n")
    loaded = load_config(PrefillConfig, path, parse_flags(["--headers.x-api-key", "flag"]))
    assert loaded.headers == {"X-Tenant": "a", "x-api-key": "flag"}
    # Authorization replaces OPENAI_API_KEY's bearer, as for a scenario's client without a key
    auth = load_config(PrefillConfig, None, {"headers": {"Authorization": "Token t"}})
    scenario = point_scenario(auth, PointSpec(0, 16, 1, 1, 1))
    assert scenario.client.headers == {"Authorization": "Token t"}


def test_an_unset_variable_is_refused_at_its_key_or_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("S21B_MB_KEY", raising=False)
    fix = (
        "${S21B_MB_KEY} is not set (or is empty) in this environment: export S21B_MB_KEY, or "
        "write the header's value in --headers (or the --config file)"
    )
    path = tmp_path / "p.yaml"
    path.write_text("quick: true\nheaders:\n  X-Tenant: a\n  X-Api-Key: ${S21B_MB_KEY}\n")
    # (loading reads no environment, as a scenario's: the doc examples load without it)
    from_file = load_config(PrefillConfig, path, {})
    with pytest.raises(ScenarioError) as caught:
        from_file.resolved_headers()
    assert [str(issue) for issue in caught.value.issues] == [
        f"{path}:4:3: headers.X-Api-Key: {fix}"
    ]
    flags = parse_flags(["--headers", "{X-Api-Key: ${S21B_MB_KEY}}"])
    config = load_config(PrefillConfig, path, flags)
    with pytest.raises(ScenarioError) as caught:
        config.resolved_headers()
    assert [str(issue) for issue in caught.value.issues] == [f"--headers.X-Api-Key: {fix}"]
    # the command reads them before anything starts: no folder, no simulator
    config = load_config(PrefillConfig, path, {"output_dir": str(tmp_path / "out")})
    with pytest.raises(ScenarioError), serving(config, PointSpec(0, 16, 1, 1, 1), "p", print):
        pass
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("S21B_MB_KEY", "sk-from-env")
    config = load_config(PrefillConfig, path, flags)
    assert config.resolved_headers() == {"X-Tenant": "a", "X-Api-Key": "sk-from-env"}
    # each point's run reads it again when it starts: its scenario keeps the name
    scenario = point_scenario(config, PointSpec(0, 16, 1, 1, 1))
    assert scenario.client.headers == {"X-Tenant": "a", "X-Api-Key": "${S21B_MB_KEY}"}


def test_the_results_settings_mask_literal_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K", "sk-from-env")
    flags = parse_flags(
        [
            "--headers",
            "{X-Api-Key: ${K}, X-Auth-Token: sk-lit, X-Tenant: a}",
            "--simulator.required_headers",
            "{X-Auth-Token: sk-lit}",
        ]
    )
    data = load_config(PrefillConfig, None, {**flags, "quick": True}).public_dict()
    assert data["headers"] == {"X-Api-Key": "${K}", "X-Auth-Token": "***", "X-Tenant": "a"}
    assert data["simulator"]["required_headers"] == {"X-Auth-Token": "***"}


def test_only_prefill_measures_an_embeddings_client() -> None:
    from veeksha.experiment.microbench.config import DecodeConfig, PrefillConfig
    from veeksha.experiment.microbench.stress_config import StressConfig

    assert (
        PrefillConfig.model_validate(
            {"quick": True, "client_type": "openai_embeddings", "input_lengths": [64]}
        ).client_type
        == "openai_embeddings"
    )
    for config, command in ((DecodeConfig, "decode"), (StressConfig, "stress")):
        with pytest.raises(ValueError, match=f"veeksha {command} measures what is generated"):
            config.model_validate(
                {"quick": True, "client_type": "openai_embeddings"} | config.QUICK
            )
