"""Behaviours of the hostile server's own test: a correct server, and one that answers every
POST with a status line that is not HTTP."""

from __future__ import annotations

from tests.integration.hostile.server import Conn, Request, default


async def correct(req: Request, conn: Conn) -> None:
    await default(req, conn)


async def not_http_after_first(req: Request, conn: Conn) -> None:
    """Correct for the probe and the first POST; then garbage where the status line should be."""
    if req.method == "POST" and req.index > 0:
        await conn.send(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        conn.close()
        return
    await default(req, conn)
