"""Password policy and hashing (argon2id, memory-hard).

Hashing is CPU- and memory-bound (~50 ms), so it runs in a worker thread and
never stalls the event loop. Unknown emails are checked against a dummy hash
so that login answers both failures in the same time.
"""

from __future__ import annotations

import asyncio

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from provisioning.errors import BadRequest

MIN_LENGTH = 10
# argon2 would hash megabytes happily; a cap keeps a login from being a DoS.
MAX_LENGTH = 1024

_hasher = PasswordHasher()
_DUMMY_HASH = _hasher.hash("dummy password used to equalise login timing")


def check_policy(password: object, email: str) -> str:
    if not isinstance(password, str):
        raise BadRequest("password must be a string", code="invalid_password")
    if len(password) < MIN_LENGTH:
        raise BadRequest(f"password must be at least {MIN_LENGTH} characters", code="weak_password")
    if len(password) > MAX_LENGTH:
        raise BadRequest(f"password must be at most {MAX_LENGTH} characters", code="invalid_password")
    local_part = email.split("@", 1)[0].lower()
    if len(set(password)) < 4 or (len(local_part) >= 4 and local_part in password.lower()):
        raise BadRequest("password is too easy to guess", code="weak_password")
    return password


async def hash_password(password: str) -> str:
    return await asyncio.to_thread(_hasher.hash, password)


def _verify(stored_hash: str | None, password: str) -> bool:
    try:
        return _hasher.verify(stored_hash or _DUMMY_HASH, password) and stored_hash is not None
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


async def verify_password(stored_hash: str | None, password: str) -> bool:
    """False for a wrong password and for `stored_hash=None` (unknown user), in equal time."""
    return await asyncio.to_thread(_verify, stored_hash, password)
