"""A planted API key reaches the server and nothing else: no file of the run folder, no output of
the command, no command line of a process the run started.

The server is a tiny aiohttp app of this test (in a thread, on loopback) that records every
Authorization header, streams short answers, and answers some requests with HTTP 500 whose body
echoes the header back, as careless proxies do: the key must not reach the error_message column.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.integration.robustness.helpers import (
    audit_run,
    cli_env,
    run_in_process,
    start_run,
    write_scenario,
)


class _RecordingServer:
    def __init__(self) -> None:
        self.authorizations: list[str] = []
        self.base_url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def __enter__(self) -> _RecordingServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        stop = self._stop
        assert stop is not None
        self._loop.call_soon_threadsafe(stop.set)
        self._thread.join(10)

    def _main(self) -> None:
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        self.authorizations.append(request.headers.get("Authorization", ""))
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        self.authorizations.append(auth)
        await request.read()
        if len(self.authorizations) % 4 == 0:
            return web.Response(
                status=500, text=f"upstream rejected headers: Authorization: {auth}"
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for word in ("hello", " there", " friend"):
            chunk = {"choices": [{"index": 0, "delta": {"content": word}}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}
        await response.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        await response.write_eof()
        return response


@pytest.fixture
def server() -> Iterator[_RecordingServer]:
    with _RecordingServer() as recording:
        yield recording


@pytest.mark.parametrize("where", ["api_key_env", "api_key"])
def test_a_planted_key_is_sent_and_never_written(
    tmp_path: Path, server: _RecordingServer, where: str
) -> None:
    key = f"sk-planted-{uuid.uuid4().hex}"
    client = f"api_base: {server.base_url}, model: m, request_timeout: 5"
    if where == "api_key":
        client += f", api_key: {key}"
    else:
        client += ", api_key_env: VEEKSHA_TEST_SECRET"
    scenario = write_scenario(
        tmp_path,
        f"""\
        traffic_scheduler:
          type: rate
          interval_generator: {{type: fixed, interval: 0.02}}
          cancel_session_on_failure: false
        session_generator:
          type: synthetic
          session_graph:
            type: linear
            num_request_generator: {{type: fixed, value: 2}}
            request_wait_generator: {{type: fixed, interval: 0}}
          output_spec: {{text: {{output_length_generator: {{type: fixed, value: 3}}}}}}
          channels: [{{type: text, body_length_generator: {{type: fixed, value: 8}}}}]
        client: {{{client}}}
        runtime: {{max_sessions: 20, num_workers: 1}}
        trace_recorder: {{enabled: true, include_content: true}}
        evaluators: [{{type: performance, stream_metrics: true, stream_metrics_interval: 0.2}}]
        """,
    )
    run = start_run(scenario, tmp_path / "out", env=cli_env(VEEKSHA_TEST_SECRET=key))
    result = run.finish(timeout=30)
    assert result.code == 0, result.output
    run.assert_no_survivors()

    # the server got it on every request (and the pre-run check)
    assert len(server.authorizations) == 1 + 40
    assert set(server.authorizations) == {f"Bearer {key}"}
    audit = audit_run(run.run_dir)
    assert audit.kinds()["error", "http_5xx"] == 10  # the echoing answers were recorded...
    assert audit.kinds()["ok", ""] == 30

    # ...but the key is nowhere: files (Parquet data and metadata, trace, config, logs, summary)
    files = [p for p in run.run_dir.rglob("*") if p.is_file()]
    assert {"config.yaml", "requests.parquet", "trace.jsonl", "summary.json"} <= {
        p.name for p in files
    }
    needle = key.encode()
    leaked = [str(p) for p in files if needle in p.read_bytes()]
    assert not leaked, f"the key was written to {leaked}"
    assert key not in result.output
    for table in (audit.requests, audit.sessions):  # decoded, in case compression hid it
        assert key not in json.dumps(table.to_pylist(), default=str)
    assert any("Authorization: Bearer ***" in (r["error_message"] or "") for r in audit.rows)
    for pid, cmdline in run.cmdlines.items():
        assert key not in " ".join(cmdline), pid
    # a fragment long enough to identify it is not there either (e.g. an unmasked suffix)
    fragment = key[-16:].encode()
    assert not [str(p) for p in files if fragment in p.read_bytes()]


def test_an_api_key_env_naming_an_unset_variable_is_refused_before_anything_is_sent(
    tmp_path: Path, server: _RecordingServer
) -> None:
    scenario = write_scenario(
        tmp_path,
        f"client: {{api_base: {server.base_url}, model: m, api_key_env: VEEKSHA_UNSET_KEY}}\n",
    )
    result = run_in_process(scenario, tmp_path / "out", env=cli_env())
    assert result.code == 2, result.output
    assert result.stderr.strip() == (
        "error: client.api_key_env names VEEKSHA_UNSET_KEY, which is not set (or is empty) in"
        " this environment: export it, or remove api_key_env to send no key"
    )
    assert server.authorizations == []  # (not even the start-up probe)
    # the default variable (OPENAI_API_KEY), unset, is a server without keys: no key is sent
    plain = write_scenario(
        tmp_path,
        f"client: {{api_base: {server.base_url}, model: m}}\nruntime: {{max_sessions: 2}}\n",
    )
    assert run_in_process(plain, tmp_path / "plain", env=cli_env()).code == 0
    assert server.authorizations  # (the probe and the requests came, each without a key)
    assert set(server.authorizations) == {""}
