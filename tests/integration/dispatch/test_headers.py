"""client.headers and client.session_header on the wire: both clients' paths, real workers."""

from __future__ import annotations

import asyncio
import socket
import time

import msgspec
import pytest

from tests.integration.dispatch.conftest import Harness
from tests.integration.dispatch.stub_server import StubServer
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.dispatch.settings import WorkerSettings
from veeksha.dispatch.worker import Worker, _sent_slot

pytestmark = pytest.mark.timeout(60)

HEADERS = {"X-Api-Key": "sk-gateway-secret-1", "X-Tenant": "acme", "User-Agent": "my-bench"}


def _sent(server: StubServer, text: str) -> dict[str, str]:
    return next(h for h, b in server.requests if b["messages"][-1]["content"] == text)


def test_the_plain_http_pool_sends_the_headers_and_each_requests_session(
    harness: Harness,
) -> None:
    harness.start_pool(2, api_key="sk-bearer", headers=HEADERS, session_header="X-Session-Id")
    pool = harness.pool
    assert pool is not None
    items = [
        WorkItem(900 + i, [("user", f"s{i}")], 3, time.monotonic_ns(), session=i % 3)
        for i in range(9)
    ]
    for it in items:
        pool.submit(it)
    results = harness.runner.run(harness.collector.wait_for([it.request_id for it in items]))
    assert all(r.status == "ok" for r in results)
    for i in range(9):
        sent = _sent(harness.server, f"s{i}")
        assert sent["X-Session-Id"] == str(i % 3)
        assert (sent["X-Api-Key"], sent["X-Tenant"]) == ("sk-gateway-secret-1", "acme")
        assert sent["User-Agent"] == "my-bench"  # (replaces veeksha's: one User-Agent)
        assert sent["Authorization"] == "Bearer sk-bearer"


def test_the_plain_http_pool_sends_each_requests_id_beside_its_session(
    harness: Harness,
) -> None:
    harness.start_pool(
        session_header="X-Session%d",  # (a % is a token character: sent as it is)
        request_id_header="X-Request-Id",
        request_id_prefix="20261127T000000Z-abc%d-",
    )
    pool = harness.pool
    assert pool is not None
    items = [
        WorkItem(700 + i, [("user", f"r{i}")], 3, time.monotonic_ns(), session=i % 2)
        for i in range(4)
    ]
    for it in items:
        pool.submit(it)
    results = harness.runner.run(harness.collector.wait_for([it.request_id for it in items]))
    assert all(r.status == "ok" for r in results)
    for i in range(4):
        sent = _sent(harness.server, f"r{i}")
        named = {name.lower(): value for name, value in sent.items()}  # (aiohttp: X-Request-ID)
        assert named["x-request-id"] == f"20261127T000000Z-abc%d-{700 + i}"
        assert sent["X-Session%d"] == str(i % 2)


def test_an_echoed_header_credential_is_masked_in_the_error(harness: Harness) -> None:
    harness.start_pool(
        headers=HEADERS, secrets=["sk-gateway-secret-1"], session_header="X-Session-Id"
    )
    assert harness.pool is not None
    it = WorkItem(990, [("user", "echo")], 3, time.monotonic_ns(), session=7)
    harness.pool.submit(it)
    (result,) = harness.runner.run(harness.collector.wait_for([it.request_id]))
    assert (result.status, result.http_status) == ("error", 400)
    assert "sk-gateway-secret-1" not in result.error_message
    assert '"X-Api-Key": "***"' in result.error_message
    assert '"X-Tenant": "acme"' in result.error_message


def test_without_a_session_header_the_pool_sends_as_before() -> None:
    """No per-request work: the route's send is the pool's own (no closure, no header)."""
    from benchmarks.worker_replay import offline_worker

    settings = WorkerSettings(endpoint="http://127.0.0.1:9/v1/completions")
    worker, pool, _, (a, b) = offline_worker(settings)
    try:
        assert worker._routes[0].send == pool.send
        with_header = WorkerSettings(
            endpoint="http://127.0.0.1:9/v1/completions", session_header="X-Session-Id"
        )
        worker2, pool2, _conn, (c, d) = offline_worker(with_header)
        assert worker2._routes[0].send != pool2.send
        c.close()
        with_id = WorkerSettings(
            endpoint="http://127.0.0.1:9/v1/completions", request_id_header="X-Request-Id"
        )
        worker3, pool3, _conn3, (e, f) = offline_worker(with_id)
        assert worker3._routes[0].send != pool3.send
        e.close()
        f.close()
        d.close()
    finally:
        a.close()
        b.close()


async def _aiohttp_sent(settings: WorkerSettings) -> tuple[list[Result], StubServer]:
    from veeksha.dispatch import aiohttp_client

    server = StubServer()
    base = await server.start()
    settings = msgspec.structs.replace(settings, endpoint=base + "/chat/completions")
    a, b = socket.socketpair()
    worker = Worker(0, settings, a)
    worker._loop = asyncio.get_running_loop()
    worker._session = aiohttp_client.make_session(settings, _sent_slot)
    results = []
    try:
        for i in range(3):
            await worker._run_item(
                WorkItem(i, [("user", f"h{i}")], 3, 0, session=40 + i), time.monotonic_ns()
            )
            results.append(worker._outbox.pop())
    finally:
        await worker._session.close()
        await server.stop()
        a.close()
        b.close()
    return results, server


def test_the_aiohttp_path_sends_the_headers_and_each_requests_session() -> None:
    settings = WorkerSettings(endpoint="x", headers=HEADERS, session_header="X-Session-Id")
    results, server = asyncio.run(_aiohttp_sent(settings))
    assert [r.status for r in results] == ["ok"] * 3
    for i in range(3):
        sent = _sent(server, f"h{i}")
        assert sent["X-Session-Id"] == str(40 + i)
        assert (sent["X-Api-Key"], sent["X-Tenant"]) == ("sk-gateway-secret-1", "acme")
        assert sent["User-Agent"] == "my-bench"
        assert "Authorization" not in sent


def test_the_aiohttp_path_sends_each_requests_id() -> None:
    settings = WorkerSettings(
        endpoint="x", request_id_header="X-Request-Id", request_id_prefix="run-"
    )
    results, server = asyncio.run(_aiohttp_sent(settings))
    assert [r.status for r in results] == ["ok"] * 3
    for i in range(3):
        sent = _sent(server, f"h{i}")
        named = {name.lower(): value for name, value in sent.items()}
        assert named["x-request-id"] == f"run-{i}"
        assert "X-Session-Id" not in sent


def test_the_aiohttp_path_without_a_session_header_sends_none() -> None:
    results, server = asyncio.run(_aiohttp_sent(WorkerSettings(endpoint="x")))
    assert [r.status for r in results] == ["ok"] * 3
    assert all("X-Session-Id" not in headers for headers, _ in server.requests)
    assert all(headers["User-Agent"] == "veeksha" for headers, _ in server.requests)
