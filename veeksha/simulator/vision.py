"""Images in chat requests, as a vision-language model served by vLLM takes them.

A chat message's content list may hold ``{"type": "image_url", "image_url": {"url": URL}}``
parts (or ``"image_url": URL``). The simulator fetches nothing, so URL must be a base64
``data:`` URL of a PNG or a JPEG (``data:image/png;base64,...``, ``data:image/jpeg;base64,...``
or ``image/jpg``). Only its header is read: the size from a PNG's IHDR chunk or a JPEG's frame
header (SOFn). An image of ``width`` × ``height`` pixels is ``ceil(width / P) * ceil(height / P)``
prompt tokens, P being ``image_patch_px`` (28 by default: Qwen2-VL's merged 28 × 28-pixel
patch, one token each).

Its tokens are pseudo-tokens of the image's bytes: from a BLAKE2b digest of the decoded data and
the token's index within the image, so the same image sent again is the same tokens (a chat's
history hits the prefix cache over its images as over its texts) and two images share none.
With the builtin tokenizer's words they are strings ``"\\x01<digest hex> <index>"`` (a space
inside: no whitespace-split word is one, and no special token starts with ``\\x01``); with
integer ids they are ``IMAGE_BASE + (start + index) mod 2**62``, ``start`` the digest's first
62 bits, so every one is in ``[2**62, 2**63)``, above every text id and special token.

>>> from veeksha.generate.images import data_url
>>> image = read_image({"url": data_url(56, 84, 1)}, "messages[0].content[0]")
>>> (image.width, image.height, image.count(28), image.count(14))
(56, 84, 6, 24)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import Any

from veeksha.generate.images import png_size

__all__ = [
    "IMAGE_BASE",
    "IMAGE_PATCH_PX",
    "IMAGE_PLACEHOLDER",
    "UNSUPPORTED_PARTS",
    "Image",
    "ImageProblem",
    "image_size",
    "jpeg_size",
    "read_image",
]

#: The default ``image_patch_px``: Qwen2-VL's 14-pixel patches merged 2 × 2 into one token.
IMAGE_PATCH_PX = 28
#: The first integer id of an image token (ids run up to ``2 * IMAGE_BASE``, excluded).
IMAGE_BASE = 1 << 62
#: How ``/apply-template`` (``chat_text``) writes an image part.
IMAGE_PLACEHOLDER = "<image>"
#: Content part types of other media, which the simulator refuses (400).
UNSUPPORTED_PARTS = frozenset(
    {"input_audio", "audio_url", "video_url", "image_embeds", "image_pil", "file"}
)
_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/jpg"})
# A JPEG's start-of-frame markers (SOF0-SOF15 but DHT C4, JPG C8, DAC CC): all hold
# precision (1 byte), height, width (2 bytes each) after the segment's length.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


@dataclass(frozen=True, slots=True)
class Image:
    """One image part of a chat message: its size, its bytes' digest, where it stands."""

    width: int
    height: int
    digest: bytes  # BLAKE2b (16 bytes) of the decoded image
    where: str  # "messages[i].content[j]"

    def count(self, patch_px: int) -> int:
        """Its number of prompt tokens with ``patch_px``-pixel square patches."""
        return -(-self.width // patch_px) * -(-self.height // patch_px)

    def words(self, n: int) -> list[str]:
        """Its ``n`` tokens as the builtin tokenizer's words (see the module doc)."""
        head = "\1" + self.digest.hex() + " "
        return [head + str(k) for k in range(n)]

    def ids(self, n: int) -> list[int]:
        """Its ``n`` tokens as integer ids (see the module doc)."""
        span = IMAGE_BASE
        start = int.from_bytes(self.digest[:8], "big") >> 2
        if start + n <= span:
            return list(range(IMAGE_BASE + start, IMAGE_BASE + start + n))
        return [IMAGE_BASE + (start + k) % span for k in range(n)]


class ImageProblem(ValueError):
    """An image part the simulator cannot read; the message names where it stands and what
    is wrong (the server answers it with a 400)."""


def read_image(value: Any, where: str) -> Image:
    """The image of an ``image_url`` part's value (``{"url": URL}`` or the URL); an
    ``ImageProblem`` naming ``where`` when it cannot be read."""
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str):
        raise _bad(where, "'image_url' must be an object with a 'url' string, or a URL string")
    if url[:5].lower() != "data:":
        shown = url if len(url) <= 40 else url[:40] + "..."
        raise _bad(
            where,
            f"the simulator takes only data: URLs (data:image/png;base64,... or "
            f"data:image/jpeg;base64,...) and fetches nothing; got {shown!r}",
        )
    head, comma, payload = url.partition(",")
    media, _, params = head[5:].partition(";")
    media = media.strip().lower()
    if not comma:
        raise _bad(where, "the data: URL has no ',' before its data")
    if media not in _MEDIA_TYPES:
        raise _bad(where, f"the image is neither a PNG nor a JPEG (media type {media!r})")
    if "base64" not in (p.strip().lower() for p in params.split(";")):
        raise _bad(where, "the simulator takes only base64 data: URLs (';base64,')")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(where, "the data: URL's base64 is invalid") from None
    size = image_size(data)
    if size is None:
        raise _bad(where, "the image is neither a PNG nor a JPEG (no PNG or JPEG header)")
    width, height = size
    if not width or not height:
        raise _bad(where, f"the image is {width} × {height} pixels: a side of 0 pixels")
    return Image(width, height, hashlib.blake2b(data, digest_size=16).digest(), where)


def _bad(where: str, what: str) -> ImageProblem:
    return ImageProblem(f"{where}: {what}")


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of PNG or JPEG ``data`` from its header; None when it is neither."""
    return png_size(data) or jpeg_size(data)


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of JPEG ``data`` from its frame header (SOFn); None when it is not a
    JPEG or ends, or its scan begins, before one."""
    if data[:2] != b"\xff\xd8":
        return None
    i, end = 2, len(data)
    while i + 1 < end:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # (a fill byte before a marker)
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # (markers without a segment)
            i += 2
            continue
        if marker in (0xD9, 0xDA) or i + 4 > end:
            return None
        if marker in _JPEG_SOF:
            if i + 9 > end:
                return None
            height = int.from_bytes(data[i + 5 : i + 7], "big")
            width = int.from_bytes(data[i + 7 : i + 9], "big")
            return width, height
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if length < 2:
            return None
        i += 2 + length
    return None
