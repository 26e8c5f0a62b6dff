"""The host's limits a run of many streams meets, checked before the first user starts.

Each simulated user holds one connection: a file descriptor in its process and
an ephemeral port on this host for as long as it streams.  Past the process's
``ulimit -n`` a connect fails with ``EMFILE`` ("Too many open files"), past the
ephemeral port range with ``EADDRNOTAVAIL``, one failed request after another —
a wall of ``connect`` errors instead of a measurement.  ``check`` says so in one
line before the run starts, with the command that raises the limit, and raises
the soft ``ulimit -n`` up to the hard one itself when that is enough.

A third limit is the target's: the listen backlog (``net.core.somaxconn`` caps
what a server asks for) holds connects that its accept loop has not taken yet;
users spawned faster than that can overflow it and be reset (``ECONNRESET``).
The bundled server checks its own (``llmload.common.limits``, which also holds
the one ``raise_nofile``); here, when the
target is on this host, a spawn batch larger than ``somaxconn`` is a note.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass, field
from pathlib import Path

from llmload.common.limits import raise_nofile, somaxconn

#: descriptors a load-generator process needs besides its users' sockets (imports,
#: the run files, locust's ZeroMQ sockets, the exporter)
BASE_FDS = 256
PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@dataclass
class Limits:
    """What ``check`` found: errors stop the run (exit 2), notes are printed."""

    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def fds_needed(users: int) -> int:
    """Descriptors a process with ``users`` users needs: one connection each, and the base."""
    return users + BASE_FDS


def _read_ints(path: Path) -> list[int] | None:
    try:
        return [int(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return None


def check(users: int, processes: int = 1, spawn_rate: float = 0.0, local: bool = False) -> Limits:
    """The limits ``users`` (spread over ``processes`` on this host) meet, and what to do.

    ``local``: the target is on this host (its accept queue is this kernel's).
    """
    out = Limits()
    per_process = -(-users // max(processes, 1))
    need = fds_needed(per_process)
    soft, hard = raise_nofile(need)
    if soft != resource.RLIM_INFINITY and soft < need:
        where = f"each of the {processes} processes" if processes > 1 else "this process"
        out.errors.append(
            f"--users {users} needs about {need} open files in {where} (one connection per "
            f"user), but the limit is {soft} (hard limit {hard}): raise it, e.g. "
            f"`ulimit -n {need}` (as root, or in /etc/security/limits.conf), or give "
            "--workers more processes"
        )
    ports = _read_ints(PORT_RANGE)
    if ports and len(ports) == 2:
        available = ports[1] - ports[0] + 1
        if users > available:
            out.errors.append(
                f"--users {users} needs {users} connections to the target from this host, but "
                f"the ephemeral port range {ports[0]}-{ports[1]} has {available} ports: widen "
                f"it (sysctl -w net.ipv4.ip_local_port_range='1024 65000') or spread the users "
                "over more hosts"
            )
        elif users > 0.8 * available:
            out.notes.append(
                f"--users {users} uses most of the ephemeral port range ({available} ports): "
                "connections closed recently (TIME_WAIT) may leave too few"
            )
    backlog = somaxconn()
    if local and backlog and spawn_rate > backlog:
        out.notes.append(
            f"--spawn-rate {spawn_rate:g} starts more users at once than the listen backlog "
            f"holds (net.core.somaxconn {backlog}): a server slower to accept may reset "
            "connects; spawn more slowly or raise somaxconn"
        )
    return out
