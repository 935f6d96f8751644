"""The image channel's pictures: a PNG of a given size that is a pure function of a seed.

A vision-language model's server decodes each image and runs its vision encoder on the pixels,
at a cost set by the image's size (its patches), not by what it shows; its caches (vLLM's
multimodal cache, a prefix cache over image tokens) key an image by its content. So a request's
image must have the size asked for and be its own: every image here is ``width`` × ``height``
RGB pixels whose first row is random bytes drawn from ``seed`` (two seeds never give the same
picture) and whose every other row repeats it (vertical stripes). The PNG is small whatever
the size: every row after the first is filtered to zeros, and those rows are written as deflate
blocks of 32 rows made once per width and repeated, so no pass is made over the pixels.
Measured: 0.15-0.25 ms an image from 512 × 512 to 2048 × 2048 (0.35-0.75 ms for a width not
seen before), 7 KB at 512 × 512 and 68 KB at 2048 × 2048 on the wire, where a photograph of
that size would be ~50-500 KB. The server's work (decoding, its vision encoder) is that of a
picture of its size; the bytes sent are not a photograph's.

``data_url(width, height, seed)`` is the ``data:image/png;base64,...`` URL a chat message's
``image_url`` part carries (the latest 64 MB of them kept: a conversation re-sends its images
with its history).
"""

from __future__ import annotations

import base64
import random
import struct
import zlib
from collections import OrderedDict
from functools import lru_cache

__all__ = ["MAX_SIDE", "data_url", "png", "png_size"]

#: The largest side of an image (pixels): a 16k × 16k picture is ~768 MB of pixels to the server
MAX_SIDE = 16_384

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_RGB = 2  # the PNG colour type of 8-bit RGB
_UP = b"\x02"  # the PNG row filter "Up": each byte minus the byte above it


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int, height: int, seed: int) -> bytes:
    """The PNG bytes of the image of ``seed`` (see the module doc)."""
    if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
        raise ValueError(f"an image is 1 to {MAX_SIDE} pixels a side (got {width} × {height})")
    first = b"\x00" + random.Random(seed).randbytes(3 * width)  # (filter "None", then RGB)
    # One deflate stream: the first row's blocks, ended on a byte (a sync flush), then the
    # other rows as self-contained blocks of rows (made once per width), repeated, then an
    # empty final block; its checksum is combined from the parts', not computed over pixels.
    head = zlib.compressobj(1, zlib.DEFLATED, -15)
    parts = [_ZLIB_HEADER, head.compress(first) + head.flush(zlib.Z_SYNC_FLUSH)]
    adler = zlib.adler32(first)
    rest = height - 1
    for rows in (_ROWS_A_BLOCK, 1):  # (as many whole blocks as fit, then single rows)
        count, rest = divmod(rest, rows)
        if count:
            block, block_adler, block_len = _rows_block(width, rows)
            parts.append(block * count)
            repeated = _adler32_repeated(block_adler, block_len, count)
            adler = _adler32_combine(adler, repeated, block_len * count)
    parts += (_FINAL_EMPTY, struct.pack(">I", adler))
    pixels = b"".join(parts)
    header = struct.pack(">IIBBBBB", width, height, 8, _RGB, 0, 0, 0)
    return _SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", pixels) + _chunk(b"IEND", b"")


_ZLIB_HEADER = b"\x78\x01"  # deflate, 32 KiB window, the fastest level's flag
_FINAL_EMPTY = b"\x03\x00"  # a final deflate block of fixed codes with nothing in it
_ADLER_BASE = 65521


_ROWS_A_BLOCK = 32  # rows after the first in one repeated deflate block (a block's own cost)


@lru_cache(maxsize=512)
def _rows_block(width: int, rows: int) -> tuple[bytes, int, int]:
    """``rows`` rows after the first (filtered "Up": each byte 0) as deflate blocks that refer
    to nothing before them (a full flush), with their Adler-32 and length."""
    data = (_UP + bytes(3 * width)) * rows
    compressor = zlib.compressobj(1, zlib.DEFLATED, -15)
    block = compressor.compress(data) + compressor.flush(zlib.Z_FULL_FLUSH)
    return block, zlib.adler32(data), len(data)


def _adler32_combine(first: int, second: int, second_len: int) -> int:
    """The Adler-32 of two byte strings one after the other, from theirs (zlib's
    ``adler32_combine``, which Python's zlib does not offer)."""
    base = _ADLER_BASE
    rem = second_len % base
    low = first & 0xFFFF
    high = (rem * low) % base
    low = (low + (second & 0xFFFF) + base - 1) % base
    high = (high + (first >> 16) + (second >> 16) + base - rem) % base
    return low | (high << 16)


def _adler32_repeated(adler: int, length: int, count: int) -> int:
    """The Adler-32 of ``count`` copies of a byte string of that ``adler`` and ``length``."""
    result = 1  # (of nothing)
    power, power_len = adler, length
    while count:
        if count & 1:
            result = _adler32_combine(result, power, power_len)
        power = _adler32_combine(power, power, power_len)
        power_len *= 2
        count >>= 1
    return result


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of PNG ``data`` from its header, or None when it is not a PNG."""
    if len(data) < 24 or data[:8] != _SIGNATURE or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


class _Urls:
    """The data: URLs made lately (a conversation sends its images again in every later
    turn), newest last, within ``budget`` characters (16384 × 16384 is 4.8 MB of them,
    1024 × 768 21 KB)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.size = 0
        self.urls: OrderedDict[tuple[int, int, int], str] = OrderedDict()

    def get(self, width: int, height: int, seed: int) -> str:
        key = (width, height, seed)
        url = self.urls.get(key)
        if url is not None:
            self.urls.move_to_end(key)
            return url
        png_bytes = png(width, height, seed)
        url = "data:image/png;base64," + base64.b64encode(png_bytes).decode("ascii")
        self.urls[key] = url
        self.size += len(url)
        while self.size > self.budget and len(self.urls) > 1:
            _, dropped = self.urls.popitem(last=False)
            self.size -= len(dropped)
        return url


_URLS = _Urls(64 << 20)


def data_url(width: int, height: int, seed: int) -> str:
    """The ``data:`` URL of the image of ``seed``, as a chat message's ``image_url`` sends it
    (the latest 64 MB of them kept)."""
    return _URLS.get(width, height, seed)
