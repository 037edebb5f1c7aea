"""The credentials file: read, locked update, written 0600 (pure file I/O, standard library only).

Its directory must be the user's own and writable by no one else (whoever can
write there could plant a session, and kubectl would act in their workspace),
and no file in it is reached through a symbolic link.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

from proxy.cli.client import cached


class StoreError(Exception):
    """The credentials file cannot be used safely: one line saying why (and how to fix it)."""


def credentials_path(env: Mapping[str, str] | None = None) -> Path:
    return Path(cached.credentials_file(env))


def _checked(directory: Path) -> None:
    problem = cached.directory_problem(str(directory))
    if problem:
        raise StoreError(problem)


def prepare(path: Path) -> None:
    """The file's directory made (0700) if missing, and refused if it is not safe."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as error:
        raise StoreError(f"cannot make {path.parent}: {error.strerror}") from None
    _checked(path.parent)


def read(path: Path) -> dict[str, Any]:
    """The credentials file's document; {} if it is missing, unreadable, a link or not a JSON object."""
    _checked(path.parent)
    return cached.read(path)


def write(path: Path, document: dict[str, Any]) -> None:
    """Atomically, and never readable by others, not even for a moment (a fresh 0600 file, renamed over it)."""
    prepare(path)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w") as out:
            json.dump(document, out, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise StoreError(f"cannot write {path}: {error.strerror}") from None
        raise


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock beside the file: one writer (and one token mint) at a time."""
    prepare(path)
    lock = path.with_name(path.name + ".lock")
    try:
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as error:
        raise StoreError(f"cannot lock {lock}: {error.strerror} (a symbolic link is refused)") from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        os.close(descriptor)
