"""Every test's calibrated server tokenizers are cached in the session's own folder, never in
the user's ~/.cache (tests that check the cache point it elsewhere themselves)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from veeksha.generate.calibration import CACHE_ENV


@pytest.fixture(autouse=True, scope="session")
def _tokenizer_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("veeksha-cache"))
    yield
    if previous is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = previous
