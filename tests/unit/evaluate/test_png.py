"""The PNG writer and matplotlib's loading (veeksha/evaluate/png.py)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from veeksha.evaluate import plots, png


def test_png_bytes_decode_to_the_image_at_its_resolution() -> None:
    # random bytes: every row's difference to the row above wraps around modulo 256; rows in
    # three blocks, the last one short
    height = 2 * png.PNG_BLOCK_ROWS + 9
    rgba = np.random.default_rng(5).integers(0, 256, (height, 23, 4), dtype=np.uint8)
    decoded = Image.open(io.BytesIO(png.png_bytes(rgba, 100.0, {"Software": "x y"})))
    assert decoded.mode == "RGBA"
    assert (np.asarray(decoded) == rgba).all()
    assert decoded.info == {"Software": "x y", "dpi": (99.9998, 99.9998)}


def test_a_saved_plot_is_the_png_savefig_writes(tmp_path: Path) -> None:
    """``save_png`` writes its own PNG (``png_bytes``): the pixels and the text and resolution
    chunks of matplotlib's ``savefig`` (through Pillow), a figure made taller after its axes
    (as ``server_plot.legend_above`` does) too."""
    fig = plots._figure(rows=2)
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot([0, 1, 2], [3, 1, 2], label="line")
    top.legend(loc="lower right", fontsize="small")
    bottom.scatter(np.arange(50), np.arange(50) % 7, s=4, alpha=0.5)
    plots._note(bottom, "a note")
    top.set_title("title")
    fig.set_figheight(fig.get_figheight() + 0.37)
    ours = png.save_png(fig, tmp_path / "ours.png")
    fig.savefig(tmp_path / "savefig.png", dpi=100, format="png")
    with Image.open(ours) as mine, Image.open(tmp_path / "savefig.png") as theirs:
        assert mine.size == theirs.size == (700, 697)
        assert (np.asarray(mine) == np.asarray(theirs)).all()
        assert mine.info == theirs.info


def test_matplotlib_is_imported_without_its_set_docstrings() -> None:
    """``load_matplotlib`` skips the property lists of the artists' ``set`` docstrings (a
    quarter of the import's CPU) and leaves ``kwdoc`` and ``set``'s signature as they were."""
    code = (
        "import inspect\n"
        "from veeksha.evaluate.png import load_matplotlib\n"
        "load_matplotlib()\n"
        "import matplotlib.artist, matplotlib.lines\n"
        "Line2D = matplotlib.lines.Line2D\n"
        "print('markevery' in inspect.signature(Line2D.set).parameters)\n"
        "print('markevery' in Line2D.set.__doc__)\n"
        "print('markevery' in matplotlib.artist.kwdoc(Line2D))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "True"]


def test_a_figure_saved_at_another_dpi_is_the_png_savefig_writes(tmp_path: Path) -> None:
    """The experiments' plots (a constrained layout, saved at a dpi not the figure's own, as the
    sweep plot's 90): the same pixels and chunks as ``savefig(path, dpi=90)``, and the
    figure's own dpi put back after."""
    fig = png.agg_figure(figsize=(6, 3), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot([1, 2, 3], [30, 10, 20], "o-", label="p50")
    left.legend()
    right.bar(["a", "b"], [3, 5])
    right.set_title("two bars")
    fig.suptitle("a suptitle")
    ours = png.save_png(fig, tmp_path / "ours.png", dpi=90)
    assert fig.dpi == 100
    fig.savefig(tmp_path / "savefig.png", dpi=90)
    with Image.open(ours) as mine, Image.open(tmp_path / "savefig.png") as theirs:
        assert mine.size == theirs.size == (540, 270)
        assert (np.asarray(mine) == np.asarray(theirs)).all()
        assert mine.info == theirs.info
