"""How the worker files a failure: the server's malformed bytes are ``malformed_response`` with
a readable message on both paths (http1 and aiohttp), never ``client_error``; a connection this
machine refused (no open file or local port) is ``client_limit``, one the server refused
``connection_refused``."""

from __future__ import annotations

import errno

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey, RequestInfo
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from veeksha.dispatch.http1 import ConnectFailed, MalformedResponse
from veeksha.dispatch.openai import ResponseError
from veeksha.dispatch.worker import _failure, _no_answer


def test_malformed_bytes_are_the_servers_fault() -> None:
    error = MalformedResponse("invalid chunk size b'zz' in the chunked body")
    assert _failure(error) == (
        "malformed_response",
        "invalid chunk size b'zz' in the chunked body",
    )
    assert _failure(ResponseError("malformed_response", "x")) == ("malformed_response", "x")
    assert _failure(ValueError("boom")) == ("client_error", "ValueError: boom")


def test_a_head_aiohttp_refuses_is_malformed_in_its_own_words() -> None:
    url = URL("http://127.0.0.1:9/v1/chat/completions")
    info = RequestInfo(url, "POST", CIMultiDictProxy(CIMultiDict()), url)
    message = "Bad status line:\n  Invalid status code:\n\n  b'HTTP/1.1 2xx OK'\n    ^"
    error = aiohttp.ClientResponseError(info, (), status=400, message=message)
    assert _failure(error) == (
        "malformed_response",
        "Bad status line: Invalid status code: b'HTTP/1.1 2xx OK'",
    )
    reset = aiohttp.ServerDisconnectedError()
    assert _failure(reset)[0] == "connection_reset"


@pytest.mark.parametrize(
    ("status", "says"),
    [(204, "without content"), (205, "without content"), (304, "without content")]
    + [(s, "a redirect") for s in (301, 302, 303, 307, 308)],
)
def test_no_answer_statuses(status: int, says: str) -> None:
    assert _no_answer(status).startswith(f"HTTP {status}: ")
    assert says in _no_answer(status)


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL, errno.ENOBUFS])
def test_a_connection_this_machine_refused_is_the_load_generators_failure(code: int) -> None:
    # (no file descriptor or local port left: the request was never sent, by veeksha's limit)
    cause = OSError(code, "no resource")
    http1 = ConnectFailed(code, f"cannot connect to 127.0.0.1:8000: {cause}")
    assert _failure(http1)[0] == "client_limit"
    key = ConnectionKey("127.0.0.1", 8443, True, True, None, None, None, "127.0.0.1")
    assert _failure(aiohttp.ClientConnectorError(key, cause))[0] == "client_limit"


def test_a_connection_the_server_refused_stays_the_servers() -> None:
    cause = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    refused = ConnectFailed(errno.ECONNREFUSED, f"cannot connect to 127.0.0.1:8000: {cause}")
    assert _failure(refused) == (
        "connection_refused",
        "ConnectFailed: cannot connect to 127.0.0.1:8000: [Errno 111] Connection refused",
    )
    key = ConnectionKey("127.0.0.1", 8443, True, True, None, None, None, "127.0.0.1")
    assert _failure(aiohttp.ClientConnectorError(key, cause))[0] == "connection_refused"
