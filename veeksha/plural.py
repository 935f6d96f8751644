"""Counts in words: ``1 request``, ``2 requests``, ``0 requests``, never ``1 requests``.

Every count a user reads (a health check's detail, the report, a search's or a sweep's lines,
run.log) takes its noun from here::

    >>> counted(1, "request"), counted(3, "measured session"), counted(1.0, "session")
    ('1 request', '3 measured sessions', '1 session')
    >>> f"{1} of {2} {noun(2, 'answer')} failed", counted(1, "entry", "entries")
    ('1 of 2 answers failed', '1 entry')

The singular is for a count of exactly one (``1``, ``1.0``); zero, fractions and every other
count take the plural (``0.5 sessions``), ``singular + "s"`` unless ``plural`` is given.
"""

from __future__ import annotations

from numbers import Integral

__all__ = ["counted", "noun"]


def noun(count: float, singular: str, plural: str | None = None) -> str:
    """``singular`` for a count of exactly 1, else ``plural`` (default ``singular + "s"``)."""
    if count == 1:
        return singular
    return plural if plural is not None else singular + "s"


def counted(count: float, singular: str, plural: str | None = None) -> str:
    """``count`` and its noun: an integer as written, any other number with ``:g``."""
    shown = str(count) if isinstance(count, Integral) else format(count, "g")
    return f"{shown} {noun(count, singular, plural)}"
