"""matplotlib on an Agg canvas, imported cheaply, and figures written as PNGs by veeksha.

Every plot veeksha draws (a run's, a sweep's, a capacity search's, a microbenchmark's) is a
``Figure`` on a ``FigureCanvasAgg`` made by :func:`agg_figure` (no pyplot global state: safe off
the main thread), written by :func:`save_png`. matplotlib is imported only when a plot is drawn,
by :func:`load_matplotlib`.
"""

from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from numpy.typing import NDArray

__all__ = [
    "PNG_BLOCK_ROWS",
    "PNG_COMPRESS_LEVEL",
    "agg_figure",
    "load_matplotlib",
    "png_bytes",
    "save_png",
]

#: zlib's level for the PNGs: 3 compresses about as well as the default (6, ~20 % smaller files)
#: in half its time.
PNG_COMPRESS_LEVEL = 3
#: Rows filtered at a time when writing a PNG (~180 kB for a 700-pixel-wide image).
PNG_BLOCK_ROWS = 64


def load_matplotlib() -> None:
    """Import what the plots draw with (~0.35 CPU-s), once per process.

    matplotlib writes, as it defines each of its ~100 artist classes, the docstring of the
    class's ``set`` method: the list of every property, each setter's docstring parsed
    (``matplotlib.artist.kwdoc``, ~0.1 CPU-s, a quarter of the import). The import here makes
    those lists empty (``help(Line2D.set)`` says less; nothing drawn reads them: ``set``'s
    signature and behaviour are unchanged) and puts ``kwdoc`` back after. When matplotlib is
    already imported, nothing is done."""
    if "matplotlib.figure" in sys.modules:
        return
    import matplotlib.artist

    kwdoc = getattr(matplotlib.artist, "kwdoc", None)  # (a matplotlib without it: as it is)
    if kwdoc is not None:
        matplotlib.artist.kwdoc = _no_kwdoc
    try:
        import matplotlib.backends.backend_agg
        import matplotlib.figure
    finally:
        if kwdoc is not None:
            matplotlib.artist.kwdoc = kwdoc


def _no_kwdoc(artist: object) -> str:
    return ""


def agg_figure(**options: Any) -> Figure:
    """A ``Figure(**options)`` on its own Agg canvas, matplotlib loaded by ``load_matplotlib``."""
    load_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(**options)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: Path, dpi: float | None = None) -> Path:
    """Draw ``fig`` on its Agg canvas at ``dpi`` (the figure's own when None) and write it to
    ``path`` as a PNG (``png_bytes``): the pixels, text chunk and resolution
    ``fig.savefig(path, dpi=dpi)`` writes, in ~5 ms where Pillow's encoder (``savefig``'s) took
    ~15 ms a plot, most of it choosing a filter per row."""
    own_dpi = fig.dpi
    if dpi is not None and dpi != own_dpi:
        fig.dpi = dpi  # (as savefig does: drawn at ``dpi``, the figure's own put back after)
    try:
        fig.canvas.draw()
        rgba = np.asarray(fig.canvas.buffer_rgba())  # type: ignore[attr-defined]
        drawn_dpi = fig.dpi
    finally:
        fig.dpi = own_dpi
    import matplotlib

    software = f"Matplotlib version{matplotlib.__version__}, https://matplotlib.org/"
    path.write_bytes(png_bytes(rgba, drawn_dpi, {"Software": software}))
    return path


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(rgba: NDArray[np.uint8], dpi: float, text: dict[str, str] | None = None) -> bytes:
    """The PNG of an RGBA image (height × width × 4, 8 bits a channel) at ``dpi``, with ``text``
    as tEXt chunks (latin-1). Every row is filtered by its difference to the row above (PNG's
    "Up" filter, numpy's subtraction over ``PNG_BLOCK_ROWS`` rows at a time): a plot's rows are
    mostly white or repeat the row above, so the file is about the size Pillow's per-row choice
    of filter gave (±3 % on a run's plots).

    >>> import io
    >>> from PIL import Image
    >>> image = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    >>> decoded = Image.open(io.BytesIO(png_bytes(image, 100.0)))
    >>> bool((np.asarray(decoded) == image).all()), decoded.info["dpi"]
    (True, (99.9998, 99.9998))
    """
    height, width, _ = rgba.shape
    rows = rgba.reshape(height, width * 4)
    compressor = zlib.compressobj(PNG_COMPRESS_LEVEL)
    data = []
    block = np.empty((min(height, PNG_BLOCK_ROWS), width * 4 + 1), dtype=np.uint8)
    block[:, 0] = 2  # each row's filter: "Up"
    for start in range(0, height, PNG_BLOCK_ROWS):
        stop = min(start + PNG_BLOCK_ROWS, height)
        filtered = block[: stop - start]
        # a row less the row above, modulo 256 as PNG's filter (the first row: itself)
        if start == 0:
            filtered[0, 1:] = rows[0]
            np.subtract(rows[1:stop], rows[: stop - 1], out=filtered[1:, 1:])
        else:
            np.subtract(rows[start:stop], rows[start - 1 : stop - 1], out=filtered[:, 1:])
        data.append(compressor.compress(filtered.data))
    data.append(compressor.flush())
    per_metre = int(dpi / 0.0254 + 0.5)
    chunks = [_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0))]
    for key, value in (text or {}).items():
        chunks.append(_chunk(b"tEXt", key.encode("latin-1") + b"\0" + value.encode("latin-1")))
    chunks.append(_chunk(b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1)))
    chunks.append(_chunk(b"IDAT", b"".join(data)))
    chunks.append(_chunk(b"IEND", b""))
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunks)
