"""The open-file limit of the processes that hold connections: raised to what the system allows.

Each connection a worker holds is an open file (a socket), and so is each one the built-in
simulator accepts. Linux's usual soft limit (``ulimit -n``) is 1024, below a closed loop of a
few thousand streams on one worker; its hard limit is usually far higher (524288 under
systemd). A worker and the simulator raise their soft limit to the hard one when they start,
as most load generators and servers do, so no request fails for want of a file descriptor the
machine would give.

When the machine still refuses one (the hard limit reached, the system's file table full, or
no local port left for another connection), the request was never sent: it is the load
generator's own failure, not the server's. Its ``error_kind`` is ``client_limit``
(:data:`CLIENT_LIMIT_ERRNOS`, ``veeksha.dispatch.worker``), and the ``generator_saturation``
health check fails on it (docs/metrics.md).
"""

from __future__ import annotations

import errno
import resource

__all__ = ["CLIENT_LIMIT_ERRNOS", "connection_shortfall", "raise_open_file_limit"]

#: A connect failing with one of these ran out of this machine's resources, not the server's:
#: no file descriptor left for the process (EMFILE) or the system (ENFILE), no local port
#: (EADDRNOTAVAIL), no socket buffer (ENOBUFS).
CLIENT_LIMIT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL, errno.ENOBUFS})

#: The soft limit asked for when the hard one is unlimited (Linux's default ``fs.nr_open``).
_UNLIMITED_CEILING = 1 << 20

#: Files a worker holds besides its connections: the interpreter's, its links, timers, epoll.
_OTHER_FILES = 64


def _target(hard: int) -> int:
    return _UNLIMITED_CEILING if hard == resource.RLIM_INFINITY else hard


def raise_open_file_limit() -> int:
    """Raise this process' soft ``RLIMIT_NOFILE`` to its hard limit; the soft limit now in
    effect (the children it starts from now on inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = _target(hard)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError):  # (a hard limit above the kernel's fs.nr_open)
        return soft
    return want


def connection_shortfall(connections: int) -> str | None:
    """A warning when a process that holds ``connections`` at once could not open them all
    under this machine's hard open-file limit (which :func:`raise_open_file_limit` reaches);
    None when it can."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = _target(hard)
    if connections + _OTHER_FILES <= limit:
        return None
    return (
        f"this machine's open-file limit ({limit}, ulimit -Hn) is below the ~{connections} "
        "connections a worker may hold at once: requests beyond it fail as client_limit, not "
        "sent (raise the hard limit, e.g. LimitNOFILE or /etc/security/limits.conf, or use more "
        "runtime.num_workers)"
    )
