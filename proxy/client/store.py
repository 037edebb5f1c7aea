"""The credentials file: read, locked update, written 0600 (pure file I/O, standard library only)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping

from proxy.client.cached import credentials_file
from proxy.client.cached import read as read  # shared with the cached-token path


def credentials_path(env: Mapping[str, str] | None = None) -> Path:
    return Path(credentials_file(env))


def write(path: Path, document: dict[str, Any]) -> None:
    """Atomically, and never readable by others, not even for a moment."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump(document, out, indent=1, sort_keys=True)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock beside the file: one writer (and one token mint) at a time."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        os.close(descriptor)
