"""The host's limits on connections: open files and the listen backlog (one place for both).

Every connection is a file descriptor: a server of thousands of streams, or a
load generator of thousands of users, needs a ``ulimit -n`` above that.
``raise_nofile`` lifts the soft limit towards what is needed (up to the hard
one; only root raises that).  The listen backlog a server asks for is capped
by ``net.core.somaxconn``: connects beyond it that the accept loop has not
taken yet are dropped or reset, which a burst of new users meets first.  The
bundled server says at start-up when either limit is below what it asks for;
the load generator checks its own side (``loadtests.run.limits``).
"""

from __future__ import annotations

import resource
from contextlib import suppress
from pathlib import Path

SOMAXCONN = Path("/proc/sys/net/core/somaxconn")
#: open files below which the server says how many streams it can hold
FEW_FDS = 4096


def raise_nofile(need: int | None = None) -> tuple[int, int]:
    """Raise the soft ``ulimit -n`` to ``need`` (None: the hard limit), up to the hard
    limit; returns (soft, hard) as they are now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinite = resource.RLIM_INFINITY
    want = hard if need is None else (need if hard == infinite else min(need, hard))
    if soft != infinite and want != infinite and soft < want:
        # refused: the soft limit stays as it is, and what follows says it binds
        with suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
    return soft, hard


def somaxconn() -> int | None:
    """``net.core.somaxconn`` (Linux), or None where it cannot be read."""
    try:
        return int(SOMAXCONN.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def server_notes(backlog: int) -> list[str]:
    """What a server that asks for ``backlog`` should say about this host's limits."""
    notes = []
    soft, hard = raise_nofile()
    if soft != resource.RLIM_INFINITY and soft < FEW_FDS:
        notes.append(
            f"open files limited to {soft} (ulimit -n; hard limit {hard}): at most about "
            f"{max(soft - 64, 0)} connections; raise it for more streams"
        )
    cap = somaxconn()
    if cap is not None and cap < backlog:
        notes.append(
            f"listen backlog {backlog} capped at {cap} by net.core.somaxconn: a burst of more "
            f"new connections than that may be reset; raise it (sysctl -w "
            f"net.core.somaxconn={backlog})"
        )
    return notes
