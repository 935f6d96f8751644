"""HTTP calls outside the traffic: the start-up probe, the server tokenizer, the simulator's
readiness check (and, later, metric scrapes). The workers' requests do not come here.

:func:`fetch` makes one call and keeps every promise a set-up step needs:

- **one deadline for the whole exchange**: connect, TLS, status line, headers and body all
  fit in ``timeout_s``, however slowly the server sends (a byte a second included): every read
  waits only for what is left of it;
- **every failure is one** :class:`~veeksha.errors.TargetError` (exit 2): one line naming the
  call, what happened (not HTTP, cut short, reset, timed out, a body larger than
  ``max_body``, an invalid ``Content-Length``, too many redirects) and the caller's ``fix``;
  whatever the server sent is masked (:class:`~veeksha.redact.Redactor`) before it is quoted;
- **redirects** (301, 302, 303, 307, 308, at most :data:`MAX_REDIRECTS`) are followed only
  within the first URL's origin (scheme, host, port), with the credentials; one to another
  origin is not followed: the call fails and names the address to configure, so the key is
  never sent anywhere but where the user pointed veeksha (curl and requests would follow it
  and drop the key; following it without the key would only make the next step fail less
  clearly). A 303, and a 301/302 after a POST, continue as a GET without a body, as browsers do.

Name resolution is the system resolver's, outside the deadline (instant for the IP addresses
and ``localhost`` that benchmarks use).

Synchronous on purpose: these calls happen before t0 or after the run, never on the loop.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from veeksha.errors import ConfigurationError, TargetError
from veeksha.redact import Redactors, header_secrets

if TYPE_CHECKING:
    import http.client
    from collections.abc import Mapping
    from email.message import Message

__all__ = [
    "MAX_BODY",
    "MAX_REDIRECTS",
    "NOT_READY_STATUSES",
    "TIMEOUT_ENV",
    "Answer",
    "fetch",
    "origin",
    "server_root",
    "setup_timeout",
]

#: Statuses of a server that is there but not serving yet (llama.cpp's 503 while it loads its
#: weights, a gateway's 502/504 while its upstream starts): ``client.ready_timeout`` waits them
#: out, and the ``answered`` health check names that setting when a run's failures are these.
NOT_READY_STATUSES = frozenset((502, 503, 504))
MAX_REDIRECTS = 5
MAX_BODY = 8 * 1024 * 1024
#: Overrides every set-up call's time limit (the probe's 5 s, the tokenizer's 30 s).
TIMEOUT_ENV = "VEEKSHA_SETUP_TIMEOUT_S"
_REDIRECTS = (301, 302, 303, 307, 308)
_QUOTED = 80  # characters of what the server sent quoted in a message


@dataclass(frozen=True, slots=True)
class Answer:
    """A complete HTTP answer (after same-origin redirects): where from, status, body."""

    url: str
    status: int
    reason: str
    headers: Message
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def excerpt(self, limit: int = 160) -> str:
        """The start of the body on one line (at most ``limit`` characters), for a message; an
        HTML page (a web server's or a proxy's error page) by its title."""
        text = self.body[:2000].decode("utf-8", "replace")
        if "html" in (self.headers.get("content-type") or "").lower() or "<html" in text.lower():
            title = re.search(r"<title>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
            named = " ".join(title.group(1).split())[:_QUOTED] if title else ""
            return f"an HTML page{f' ({named})' if named else ''}"
        return " ".join(text.split())[:limit]

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not JSON (or nested too deep to read)."""
        try:
            return json.loads(self.body)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None


def setup_timeout(default: float) -> float:
    """Seconds allowed to one set-up call: ``default``, or ``$VEEKSHA_SETUP_TIMEOUT_S``."""
    value = os.environ.get(TIMEOUT_ENV, "")
    try:
        seconds = float(value) if value else default
    except ValueError:
        raise ConfigurationError(f"{TIMEOUT_ENV}={value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise ConfigurationError(f"{TIMEOUT_ENV}={value!r}: the timeout must be more than 0 s")
    return seconds


def server_root(api_base: str) -> str:
    """The server's root of an ``api_base`` (``http://host:8000/v1`` → ``http://host:8000``)."""
    parts = urlsplit(api_base)
    return f"{parts.scheme}://{parts.netloc}"


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``url``, the default port filled in."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or (443 if scheme == "https" else 80)


def fetch(
    method: str,
    url: str,
    *,
    json_body: Any = None,
    api_key: str | None = None,
    timeout_s: float = 5.0,
    max_body: int = MAX_BODY,
    fix: str = "",
    headers: Mapping[str, str] | None = None,
) -> Answer:
    """``method url`` (with ``json_body`` as JSON, ``api_key`` as a bearer token and
    ``headers``, a client's own, if given), whole within ``timeout_s``; the answer, whatever
    its status. Raises ``TargetError`` (``"{method} {url}: {what happened}. {fix}"``) when no
    complete HTTP answer came. A header of ``headers`` named as one of the request's own
    (``User-Agent``) replaces it."""
    import http.client  # (with email's parser: imported by the call, not by every process)

    deadline = time.monotonic() + timeout_s
    first = origin(url)
    body = None if json_body is None else json.dumps(json_body).encode()
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        try:
            answer = _exchange(method, current, body, api_key, deadline, max_body, headers)
        except (OSError, http.client.HTTPException, ValueError, _Failure) as exc:
            redact = Redactors(header_secrets(api_key, headers))
            if isinstance(exc, TimeoutError):
                what = f"no complete answer within {timeout_s:g} s"
            else:
                what = _describe(exc, redact)
            raise _error(method, current, what, fix, redact) from None
        location = answer.headers.get("location")
        if answer.status not in _REDIRECTS or not location:
            return answer
        target = urljoin(current, location.strip())
        if origin(target) != first:
            what = (
                f"redirected (HTTP {answer.status}) to {target}, another server: not followed, "
                "so that neither the request nor the API key goes where it was not configured to "
                "go; use that address instead if it is the right one"
            )
            raise _error(method, current, what, "", Redactors(header_secrets(api_key, headers)))
        if answer.status == 303 or (answer.status in (301, 302) and method == "POST"):
            method, body = "GET", None
        current = target
    redact = Redactors(header_secrets(api_key, headers))
    raise _error(method, url, f"more than {MAX_REDIRECTS} redirects", fix, redact)


def _error(method: str, url: str, what: str, fix: str, redact: Redactors) -> TargetError:
    message = f"{method} {url}: {what}"
    if fix:
        message += f". {fix}"
    return TargetError(" ".join(redact(message).split()))  # one line, whatever was quoted


class _Failure(Exception):
    """A failure already described in the user's words."""


def _describe(exc: BaseException, redact: Redactors) -> str:
    import http.client
    import ssl

    if isinstance(exc, _Failure):
        return str(exc)
    if isinstance(exc, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError):
        return "the server closed the connection without answering"
    if isinstance(exc, http.client.BadStatusLine):
        return f"the answer is not HTTP (it began {_quote(str(exc), redact)})"
    if isinstance(exc, http.client.IncompleteRead):
        expected = "" if exc.expected is None else f" of {len(exc.partial) + exc.expected}"
        return f"the answer was cut short ({len(exc.partial)}{expected} bytes of its body came)"
    if isinstance(exc, http.client.LineTooLong):
        return f"the answer is not valid HTTP ({exc})"
    if isinstance(exc, http.client.HTTPException):
        return f"the answer is not valid HTTP ({type(exc).__name__}: {_quote(str(exc), redact)})"
    if isinstance(exc, ConnectionRefusedError):
        return "Connection refused (nothing listens there)"
    if isinstance(exc, ssl.SSLError):
        return f"TLS failed ({exc.reason or exc})"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host ({exc.strerror or exc})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {_quote(str(exc), redact)}"


def _quote(text: str, redact: Redactors) -> str:
    """What the server sent, masked, then cut, as a Python literal."""
    return repr(redact(text, _QUOTED))


# ---------------------------------------------------------------------------------- one exchange


def _exchange(
    method: str,
    url: str,
    body: bytes | None,
    api_key: str | None,
    deadline: float,
    max_body: int,
    headers: Mapping[str, str] | None = None,
) -> Answer:
    import http.client

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _Failure("not an http(s) URL")
    scheme, host, port = origin(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [
        f"{method} {target} HTTP/1.1",
        f"Host: {parts.netloc.rpartition('@')[2]}",
        "User-Agent: veeksha",
        "Accept: application/json",
        "Connection: close",
    ]
    if api_key:
        lines.append(f"Authorization: Bearer {api_key}")
    if headers:
        own = {name.lower() for name in headers}
        lines = [line for line in lines if line.partition(":")[0].lower() not in own]
        lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
    sock = _connect(host, port, deadline)
    try:
        if scheme == "https":
            import ssl

            sock.settimeout(_left(deadline))  # (a TLS handshake keeps to one timeout overall)
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        sock.settimeout(_left(deadline))  # (sendall keeps to one timeout overall)
        sock.sendall(request)
        response = http.client.HTTPResponse(_DeadlineSocket(sock, deadline), method=method)  # type: ignore[arg-type]
        try:
            response.begin()
            data = _read_body(response, max_body)
        finally:
            response.close()
        return Answer(url, response.status, response.reason, response.headers, data)
    finally:
        sock.close()


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    """A connected socket, trying each address of ``host`` within what is left of the time."""
    error: OSError | None = None
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(address)
        except OSError as exc:
            sock.close()
            error = exc
            if isinstance(exc, TimeoutError):
                break
        else:
            return sock
    raise error or OSError(f"no address for {host}")


def _read_body(response: http.client.HTTPResponse, max_body: int) -> bytes:
    lengths = response.headers.get_all("content-length") or []
    if lengths and not response.chunked:
        values = {value.strip() for value in ",".join(lengths).split(",")}
        if len(values) != 1 or not all(v.isascii() and v.isdigit() for v in values):
            raise _Failure("the answer's Content-Length is not a number")
        if int(values.pop()) > max_body:
            raise _Failure(f"the answer's body is larger than {max_body:,} bytes")
        return response.read()  # exactly Content-Length bytes, or IncompleteRead
    parts: list[bytes] = []
    size = 0
    while data := response.read(64 * 1024):  # chunked, or until the server closes
        size += len(data)
        if size > max_body:
            raise _Failure(f"the answer's body is larger than {max_body:,} bytes")
        parts.append(data)
    return b"".join(parts)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


class _DeadlineSocket:
    """What ``HTTPResponse`` reads through: every read waits only until the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))


class _DeadlineReader(io.RawIOBase):
    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._sock.settimeout(_left(self._deadline))
        return self._sock.recv_into(buffer)
