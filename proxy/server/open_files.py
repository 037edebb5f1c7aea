"""The gateway's own limit on open files, raised to the most it may have.

Every open watch, log follow, exec or port-forward holds two descriptors in
the gateway: the client's connection and its own upstream connection to the
API server (HTTP/1.1: one connection per stream). 10,000 watches need 20,000
and more. Container runtimes and systemd commonly start a process with a
soft limit of 1,024 under a hard limit of 524,288 or more; the soft limit is
the one that refuses a connection (EMFILE, a 502 or a dropped client), and a
process may raise it up to the hard limit itself, as Go's runtime does for
the API server and etcd. So the gateway raises it at start, and says in its
log how many streams the limit it got leaves room for.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

DESCRIPTORS_PER_STREAM = 2
_WITHOUT_STREAMS = 256
"""Descriptors kept for everything else: listeners, the database pool, the
event listener, certificate and settings files, ordinary requests in flight."""
_UNLIMITED_CAP = 1 << 20
"""What an unlimited hard limit is read as (the kernel's default fs.nr_open)."""


def wanted_soft_limit(soft: int, hard: int) -> int:
    """The soft limit to ask for: the hard one (never lower than the soft one). Pure."""
    ceiling = _UNLIMITED_CAP if hard == resource.RLIM_INFINITY else hard
    return max(soft, ceiling)


def streams_room(soft: int) -> int:
    """About how many open streams a soft limit leaves room for. Pure."""
    return max(0, (soft - _WITHOUT_STREAMS) // DESCRIPTORS_PER_STREAM)


def raise_open_files_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; the
    soft limit it has afterwards. A refusal (an unlimited hard limit above
    fs.nr_open) keeps the one it had."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = wanted_soft_limit(soft, hard)
    if wanted != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            log.warning("could not raise the open-files limit from %s to %s", soft, wanted)
    log.info("open-files limit %s: room for about %s open streams (watches, logs, exec, port-forward) "
             "at %s descriptors each", soft, streams_room(soft), DESCRIPTORS_PER_STREAM)
    return soft
