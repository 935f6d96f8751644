"""Emptying each server's prefix cache before a run (the scenario's ``prefix_cache_reset``).

A server with a prefix cache (vLLM's automatic prefix caching, SGLang's radix cache,
llama.cpp's per-slot prompt cache) keeps the prompts of the run before: the repeats of
``--repeats`` and the points of a sweep send the same prompts again, so the second run finds
them cached and reads faster than the first for that reason alone. Emptied before each run
(before its warmup, before t0), every run starts from a cold cache; a run's own reuse (the
turns of a conversation, shared prefixes) is untouched.

The calls, at the server's root (not under ``/v1``):

- vLLM: ``POST /reset_prefix_cache``, served only when vLLM runs with
  ``VLLM_SERVER_DEV_MODE=1`` (a managed vLLM server gets it: ``veeksha.server.managed``);
- SGLang: ``POST /flush_cache``, refused (400) while requests run;
- llama.cpp: ``GET /slots``, then ``POST /slots/{id}?action=erase`` for each slot (unless the
  server runs with ``--no-slots``).

``api: auto`` tries them in that order and uses the first the server does not answer 404 (or
405, 501: not there); a server that answers none, or that fails one it has, is exit 2 with
nothing sent. Each distinct server of the run's clients is emptied once. Nothing on the traffic
path waits for this: it is a set-up call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from veeksha.errors import TargetError
from veeksha.net import Answer, fetch, server_root, setup_timeout
from veeksha.scenario.server import PrefixCacheResetConfig

__all__ = ["APIS", "reset_prefix_caches"]

#: The servers' calls, in the order ``api: auto`` tries them.
APIS = ("vllm", "sglang", "llama_cpp")
#: Seconds allowed to each call (``$VEEKSHA_SETUP_TIMEOUT_S`` overrides it).
TIMEOUT_S = 30.0
#: Statuses that say the server has no such call (tried next by ``api: auto``).
_ABSENT = frozenset((404, 405, 501))
FIX = (
    "vLLM serves POST /reset_prefix_cache only when it runs with VLLM_SERVER_DEV_MODE=1 (a "
    "managed vLLM server gets it), SGLang serves POST /flush_cache, llama.cpp /slots unless "
    "it runs with --no-slots; or set prefix_cache_reset.enabled: false"
)

REFUSED = (
    "The server has the call and refused it (SGLang does while requests run or wait; a key or "
    "header it wants?); or set prefix_cache_reset.enabled: false"
)


class _Absent(Exception):
    """The server has no such call (``call``: what was asked, ``status``: its answer)."""

    def __init__(self, call: str, status: int) -> None:
        super().__init__(call)
        self.call = call
        self.status = status


def reset_prefix_caches(
    config: PrefixCacheResetConfig,
    targets: Sequence[tuple[str, str | None, dict[str, str]]],
) -> dict[str, Any]:
    """Empty the prefix cache of each server of ``targets`` ((api_base, api_key, headers) of the
    run's clients); summary.json's ``run.prefix_cache_reset``: for each server, the API used,
    the calls made and their seconds. ``TargetError`` (exit 2) when a server cannot."""
    timeout = setup_timeout(TIMEOUT_S)
    seen: set[str] = set()
    servers = []
    for api_base, api_key, headers in targets:
        root = server_root(api_base)
        if root in seen:
            continue
        seen.add(root)
        began = time.monotonic()
        api, calls = _reset(root, api_key, headers, config.api, timeout)
        servers.append(
            {
                "server": root,
                "api": api,
                "calls": calls,
                "seconds": round(time.monotonic() - began, 4),
            }
        )
    return {"servers": servers, "at_wall": time.time()}


def _reset(
    root: str, api_key: str | None, headers: dict[str, str], api: str, timeout: float
) -> tuple[str, list[str]]:
    """(the API used, its calls) for one server."""
    absent: list[str] = []
    for candidate in APIS if api == "auto" else (api,):
        try:
            if candidate == "llama_cpp":
                return candidate, _erase_slots(root, api_key, headers, timeout)
            path = "/reset_prefix_cache" if candidate == "vllm" else "/flush_cache"
            _call("POST", root, path, api_key, headers, timeout)
            return candidate, [f"POST {path}"]
        except _Absent as missing:
            absent.append(f"{missing.call}: HTTP {missing.status}")
    raise TargetError(
        f"prefix_cache_reset: {root} has no call that empties its prefix cache "
        f"({'; '.join(absent)}). {FIX}"
    )


def _erase_slots(
    root: str, api_key: str | None, headers: dict[str, str], timeout: float
) -> list[str]:
    """llama.cpp: every slot of ``GET /slots`` erased."""
    answer = _call("GET", root, "/slots", api_key, headers, timeout)
    try:
        ids = [int(slot["id"]) for slot in answer.json()]
    except (ValueError, TypeError, KeyError) as exc:
        raise TargetError(
            f"GET {root}/slots: not llama.cpp's list of slots ({exc!r}): "
            f"{answer.excerpt(200)}. {FIX}"
        ) from None
    for slot in ids:
        _call("POST", root, f"/slots/{slot}?action=erase", api_key, headers, timeout)
    return ["GET /slots", *(f"POST /slots/{slot}?action=erase" for slot in ids)]


def _call(
    method: str,
    root: str,
    path: str,
    api_key: str | None,
    headers: dict[str, str],
    timeout: float,
) -> Answer:
    url = root + path
    body: dict[str, Any] | None = None if method == "GET" else {}
    answer = fetch(
        method, url, json_body=body, api_key=api_key, timeout_s=timeout, fix=FIX, headers=headers
    )
    if answer.status in _ABSENT:
        raise _Absent(f"{method} {path}", answer.status)
    if not answer.ok:
        raise TargetError(f"{method} {url}: HTTP {answer.status} {answer.excerpt(200)}. {REFUSED}")
    return answer
