"""summary.json's ``run.chunk_timestamps``: how the run's chunks were stamped, by client scheme."""

from __future__ import annotations

import pytest

from veeksha.dispatch.kernel_stamps import KERNEL_STAMPS_SUPPORTED, chunk_timestamps

H, S = "http://127.0.0.1:8000/v1", "https://api.example.com/v1"


def test_read_is_read_whatever_the_clients() -> None:
    assert chunk_timestamps("read", [H]) == "read"
    assert chunk_timestamps("read", [H, S]) == "read"


@pytest.mark.skipif(not KERNEL_STAMPS_SUPPORTED, reason="kernel stamps are Linux only")
def test_kernel_names_what_each_scheme_got() -> None:
    assert chunk_timestamps("kernel", [H, H]) == "kernel"
    assert chunk_timestamps("kernel", [S]) == "read"  # https reads stay aiohttp's
    assert chunk_timestamps("kernel", [H, S]) == "mixed"
