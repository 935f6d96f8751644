"""The image channel's pictures (veeksha.generate.images): real PNGs of the size asked for,
a pure function of their seed, each seed its own picture, cheap to make at any size."""

from __future__ import annotations

import base64
import io
import random
import zlib

import pytest
from PIL import Image

from veeksha.generate.images import MAX_SIDE, _adler32_combine, data_url, png, png_size


@pytest.mark.parametrize(("width", "height"), [(1, 1), (28, 56), (512, 512), (1000, 37)])
def test_a_png_decodes_to_its_size_in_rgb_with_every_row_its_first(width: int, height: int) -> None:
    picture = Image.open(io.BytesIO(png(width, height, 7)))
    picture.load()  # (decodes every chunk: checksums and the deflate stream)
    assert (picture.format, picture.mode, picture.size) == ("PNG", "RGB", (width, height))
    rows = picture.tobytes()
    first = rows[: 3 * width]
    assert first == random.Random(7).randbytes(3 * width)
    assert rows == first * height
    assert png_size(png(width, height, 7)) == (width, height)


def test_the_same_seed_is_the_same_picture_and_another_seed_another() -> None:
    assert png(64, 48, 1) == png(64, 48, 1)
    pictures = {png(64, 48, seed) for seed in range(50)}
    assert len(pictures) == 50
    # a size's other rows are made once and spliced: the first picture of a size is the same
    # bytes as one made after others of that size
    assert png(33, 17, 5) == png(33, 17, 5)


def test_a_data_url_is_the_png_in_base64() -> None:
    url = data_url(30, 20, 3)
    prefix = "data:image/png;base64,"
    assert url.startswith(prefix)
    assert base64.b64decode(url[len(prefix) :]) == png(30, 20, 3)


def test_a_large_picture_is_small_on_the_wire() -> None:
    data = png(2048, 2048, 1)
    assert png_size(data) == (2048, 2048)
    assert len(data) < 100_000  # (12 MB of pixels)


@pytest.mark.parametrize(("width", "height"), [(0, 5), (5, 0), (MAX_SIDE + 1, 1), (-1, 1)])
def test_a_side_outside_1_to_the_largest_is_refused(width: int, height: int) -> None:
    with pytest.raises(ValueError, match="1 to 16384 pixels a side"):
        png(width, height, 0)


def test_png_size_is_none_for_other_bytes() -> None:
    assert png_size(b"GIF89a" + bytes(30)) is None
    assert png_size(png(3, 3, 0)[:20]) is None


def test_the_checksum_of_two_parts_is_zlibs_of_both() -> None:
    rng = random.Random(11)
    for _ in range(200):
        first = rng.randbytes(rng.randrange(0, 300))
        second = bytes(rng.randrange(0, 70_000))
        second = rng.randbytes(rng.randrange(0, 50)) + second
        combined = _adler32_combine(zlib.adler32(first), zlib.adler32(second), len(second))
        assert combined == zlib.adler32(first + second)


def test_the_urls_kept_stay_within_their_budget_newest_kept() -> None:
    from veeksha.generate.images import _Urls

    urls = _Urls(budget=3 * len(data_url(40, 40, 0)) + 10)
    for seed in range(5):
        assert urls.get(40, 40, seed) == data_url(40, 40, seed)
    assert list(urls.urls) == [(40, 40, 2), (40, 40, 3), (40, 40, 4)]
    assert urls.size == sum(len(u) for u in urls.urls.values())
    urls.get(40, 40, 2)  # (used again: the newest now)
    urls.get(40, 40, 9)
    assert list(urls.urls) == [(40, 40, 4), (40, 40, 2), (40, 40, 9)]
