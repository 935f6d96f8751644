"""The GPUs of a run: dcgm-exporter's answers read as ``gpu:*`` rows, and the summary's ``gpus``
section (energy over the throughput window from the energy counter, else from the power,
per output token and request), its report table and its compare rows."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from veeksha.evaluate.compare import ComparedRun, render_compare
from veeksha.evaluate.gpus import gpu_section, held_for, integrate, interpolated_increase
from veeksha.evaluate.report import render_summary
from veeksha.evaluate.server_view import ServerView, load_server_view
from veeksha.record.server_metrics import ServerMetricsWriter
from veeksha.server.dcgm import gpu_samples
from veeksha.server.scraper import parse_metrics

_LABELS = 'gpu="{i}",UUID="GPU-{i}abc",device="nvidia{i}",modelName="NVIDIA H100",Hostname="n1"'


def _exporter_page(power: float, energy_mj: float, util: float, gpus: int = 1) -> str:
    """A dcgm-exporter answer (the fields and labels of its default CSV)."""
    lines: list[str] = []
    for name, kind, value in (
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", util),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", power),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", energy_mj),
        ("DCGM_FI_DEV_FB_USED", "gauge", 70000),
        ("DCGM_FI_DEV_FB_FREE", "gauge", 11000),
        ("DCGM_FI_DEV_FB_RESERVED", "gauge", 559),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", 61),
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", 1980),
        ("DCGM_FI_PROF_SM_ACTIVE", "gauge", 0.75),
    ):
        lines.append(f"# TYPE {name} {kind}")
        lines += [f"{name}{{{_LABELS.format(i=i)}}} {value}" for i in range(gpus)]
    lines += ["# TYPE dcgm_exporter_up gauge", "dcgm_exporter_up 1"]  # (no gpu label)
    return "\n".join(lines) + "\n"


def test_an_exporters_fields_become_gpu_rows_in_veekshas_units() -> None:
    rows = gpu_samples(parse_metrics(_exporter_page(350.5, 2_000_000, 97)), source=1)
    by_name = {name: (labels, value, kind) for name, labels, value, kind, _ in rows}
    labels = json.loads(by_name["gpu:power"][0])
    assert labels == {"gpu": "0", "model": "NVIDIA H100", "source": "1", "uuid": "GPU-0abc"}
    assert by_name["gpu:power"][1:] == (350.5, "gauge")
    assert by_name["gpu:utilization"][1] == 97
    assert by_name["gpu:energy"][1:] == (2000.0, "counter")  # mJ → J
    assert by_name["gpu:memory_used"][1] == 70000
    assert by_name["gpu:memory_total"][1] == 70000 + 11000 + 559  # used + free + reserved
    assert by_name["gpu:temperature"][1] == 61
    assert by_name["gpu:sm_clock"][1] == 1980
    assert by_name["gpu:DCGM_FI_PROF_SM_ACTIVE"][1] == 0.75  # kept, under its own name
    assert all(name.startswith("gpu:") for name in by_name)  # (the exporter's own: left out)


def test_an_energy_field_declared_a_gauge_is_still_a_counter() -> None:
    page = "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION gauge\n"
    page += 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"} 5000\n'
    (row,) = gpu_samples(parse_metrics(page), source=0)
    assert row[0] == "gpu:energy"
    assert row[2] == 5.0
    assert row[3] == "counter"


def test_a_counter_is_read_at_the_windows_ends_by_interpolation() -> None:
    times, values = np.array([-0.1, 1.0, 2.0, 3.1]), np.array([100.0, 210.0, 330.0, 440.0])
    # from 0 (100 + 0.1/1.1 × 110 = 110) to 2.5 (330 + 0.5/1.1 × 110 = 380)
    assert interpolated_increase((times, values), 0.0, 2.5) == pytest.approx(270.0)
    assert interpolated_increase((times, np.array([100.0, 210.0, 5.0, 50.0])), 0, 2.5) is None


def test_a_sample_holds_over_the_interval_before_it() -> None:
    # (as dcgm-exporter and nvidia-smi report power: the average since the sample before)
    times, power = np.array([0.0, 1.0, 2.0]), np.array([100.0, 300.0, 500.0])
    assert list(held_for((times, power), 0.5, 1.5)) == [0.0, 0.5, 0.5]
    assert integrate((times, power), 0.5, 1.5) == pytest.approx(0.5 * 300 + 0.5 * 500)
    assert integrate((times, power), 0.0, 2.0) == pytest.approx(300.0 + 500.0)
    assert integrate((times, power), -1.0, 5.0) == pytest.approx(300.0 + 500.0)  # (covered)


def _view_of(tmp_path: Path, pages: list[tuple[float, str, int]]) -> ServerView:
    """server_metrics.parquet of exporter scrapes (t, page, source), read back as a view."""
    writer = ServerMetricsWriter(tmp_path, {})
    for t, page, source in pages:
        writer.add(t, gpu_samples(parse_metrics(page), source=source))
    writer.close({})
    view = load_server_view(tmp_path)
    assert view is not None
    return view


_THROUGHPUT = {
    "window_start": 0.0,
    "window_end": 2.0,
    "output_tokens": 4000,
    "completed_requests": 100,
    "output_tokens_per_s": 2000.0,
}


def test_the_section_gives_energy_per_output_token_over_the_throughput_window(
    tmp_path: Path,
) -> None:
    # 2 GPUs at 100 W before t0, 500 W under load: the counter rises 500 J a second each
    pages = [
        (-0.5, _exporter_page(100, 0, 0, gpus=2), 0),
        (1.0, _exporter_page(500, 500_000, 90, gpus=2), 0),
        (2.0, _exporter_page(500, 1_000_000, 100, gpus=2), 0),
        (2.5, _exporter_page(100, 1_100_000, 10, gpus=2), 0),
    ]
    section = gpu_section(_view_of(tmp_path, pages), _THROUGHPUT)
    assert section is not None
    assert section["source"] == "dcgm-exporter"
    assert section["count"] == 2
    # each GPU: from t=0 (0 + 0.5/1.5 × 500 J) to t=2 (1000 J)
    each = 1000.0 - 500.0 / 3
    assert [g["energy_j"] for g in section["per_gpu"]] == pytest.approx([each, each])
    assert {g["energy_from"] for g in section["per_gpu"]} == {"counter"}
    assert section["energy_j"] == pytest.approx(2 * each)
    assert section["covered_s"] == pytest.approx(2.0)
    assert section["joules_per_output_token"] == pytest.approx(2 * each / 4000)
    assert section["output_tokens_per_joule"] == pytest.approx(4000 / (2 * each))
    assert section["joules_per_request"] == pytest.approx(2 * each / 100)
    assert section["output_tokens_per_s_per_gpu"] == 1000.0
    # the gauges: each sample held over the interval before it, time-weighted over the window:
    # 90 % over (-0.5, 1] and 100 % over (1, 2], 1 s each inside it
    assert section["utilization_mean"] == pytest.approx(95.0)
    # the average power: the energy over the seconds it covers
    assert section["power_mean_w"] == pytest.approx(2 * each / 2.0)
    assert section["per_gpu"][0]["utilization_peak"] == 100
    assert section["per_gpu"][0]["power_peak_w"] == 500
    first = section["per_gpu"][0]
    assert first["gpu"] == "0"
    assert first["uuid"] == "GPU-0abc"
    assert first["model"] == "NVIDIA H100"
    assert first["memory_used_peak_mib"] == 70000
    assert first["memory_total_mib"] == 81559
    assert first["temperature_peak_c"] == 61
    assert first["sm_clock_mean_mhz"] == 1980


def test_without_a_counter_the_power_is_integrated(tmp_path: Path) -> None:
    writer = ServerMetricsWriter(tmp_path, {})
    for t, watts in ((-0.5, 100.0), (1.0, 400.0), (2.0, 400.0), (2.5, 100.0)):  # (nvidia-smi)
        writer.add(t, [("gpu:power", '{"gpu": "0"}', watts, "gauge", None)])
    writer.close({})
    view = load_server_view(tmp_path)
    assert view is not None
    section = gpu_section(view, _THROUGHPUT)
    assert section is not None
    assert section["source"] == "nvidia-smi"
    (gpu,) = section["per_gpu"]
    assert gpu["energy_from"] == "power"
    # 400 W over (-0.5, 1] and (1, 2]: 2 s of the window
    assert gpu["energy_j"] == pytest.approx(800.0)
    assert gpu["power_mean_w"] == pytest.approx(400.0)


def test_a_counter_reset_falls_back_to_the_power(tmp_path: Path) -> None:
    pages = [
        (-0.5, _exporter_page(200, 9_000_000, 0), 0),
        (1.0, _exporter_page(200, 100_000, 50), 0),  # (the exporter's GPU was reset)
        (2.5, _exporter_page(200, 400_000, 50), 0),
    ]
    section = gpu_section(_view_of(tmp_path, pages), _THROUGHPUT)
    assert section is not None
    assert section["per_gpu"][0]["energy_from"] == "power"
    assert section["energy_j"] == pytest.approx(400.0)  # 200 W for 2 s


def test_samples_that_cover_part_of_the_window_say_how_much(tmp_path: Path) -> None:
    pages = [(0.5, _exporter_page(300, 0, 50), 0), (1.5, _exporter_page(300, 300_000, 50), 0)]
    section = gpu_section(_view_of(tmp_path, pages), _THROUGHPUT)
    assert section is not None
    assert section["covered_s"] == pytest.approx(1.0)
    assert section["window_s"] == 2.0
    assert section["energy_j"] == pytest.approx(300.0)


def test_gpus_of_several_exporters_are_named_by_exporter(tmp_path: Path) -> None:
    pages = [
        (t, _exporter_page(100 * (1 + source), 1000 * t * (1 + source), 50), source)
        for t in (-0.1, 2.1)
        for source in (0, 1)
    ]
    view = _view_of(tmp_path, pages)
    section = gpu_section(view, _THROUGHPUT)
    assert section is not None
    assert [(g["gpu"], g["source"]) for g in section["per_gpu"]] == [("0.0", "0"), ("1.0", "1")]
    assert [g["energy_j"] for g in section["per_gpu"]] == pytest.approx([2.0, 4.0])
    assert "power_gpu1.0_peak" in view.section()
    assert not any(k.startswith(("energy_", "DCGM_")) for k in view.section())


def test_no_gpu_rows_no_section() -> None:
    assert gpu_section(ServerView(), _THROUGHPUT) is None


def _summary_with(gpus: dict[str, object] | None) -> dict[str, object]:
    summary: dict[str, object] = {
        "requests": {"total": 100, "ok": 100},
        "throughput": dict(_THROUGHPUT),
        "server": {"scrapes": 4, "running_peak": 3, "power_gpu0_peak": 500.0},
        "health": {"verdict": "PASS"},
    }
    if gpus is not None:
        summary["gpus"] = gpus
    return summary


def test_the_report_shows_the_gpus_at_80_columns(tmp_path: Path) -> None:
    pages = [
        (-0.5, _exporter_page(100, 0, 0, gpus=2), 0),
        (2.5, _exporter_page(500, 1_250_000, 100, gpus=2), 0),
    ]
    section = gpu_section(_view_of(tmp_path, pages), _THROUGHPUT)
    out = io.StringIO()
    render_summary(Console(file=out, width=80, color_system=None), _summary_with(section))
    text = out.getvalue()
    assert "GPUs (2, dcgm-exporter)" in text
    assert "energy per output token" in text
    assert "output tokens per joule" in text
    assert "GPU 0" in text
    assert "GPU 1" in text
    assert "power gpu0 (peak)" not in text  # (the server's table leaves them to this one)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    out = io.StringIO()  # (a summary of before the section: the server's table has the peaks)
    render_summary(Console(file=out, width=80, color_system=None), _summary_with(None))
    assert "power gpu0 (peak)" in out.getvalue()
    assert "GPUs (" not in out.getvalue()


def test_compare_sets_the_energy_per_token_side_by_side() -> None:
    runs = [
        ComparedRun("a", _summary_with({"joules_per_output_token": 0.5, "power_mean_w": 700})),
        ComparedRun("b", _summary_with({"joules_per_output_token": 0.4, "power_mean_w": 600})),
    ]
    out = io.StringIO()
    render_compare(Console(file=out, width=120, color_system=None), runs)
    line = next(x for x in out.getvalue().splitlines() if "energy / output token" in x)
    assert "0.5 J" in line
    assert "0.4 J (-20.0%)" in line
