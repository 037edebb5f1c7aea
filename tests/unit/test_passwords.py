"""Password policy, and the login timing equaliser's mechanism (not its timing)."""

from __future__ import annotations

import pytest

from provisioning.errors import BadRequest
from proxy.auth import passwords


@pytest.mark.parametrize("password, code", [
    ("short", "weak_password"), ("aaaaaaaaaaaa", "weak_password"), ("alice@example.test!", "weak_password"),
    (None, "invalid_password"), ("x" * 1025, "invalid_password"),
])
def test_policy_refuses(password: object, code: str) -> None:
    with pytest.raises(BadRequest) as refused:
        passwords.check_policy(password, "alice@example.test")
    assert refused.value.code == code


async def test_hash_round_trip() -> None:
    stored = await passwords.hash_password("correct horse battery")
    assert stored.startswith("$argon2id$")
    assert await passwords.verify_password(stored, "correct horse battery")
    assert not await passwords.verify_password(stored, "wrong horse battery")


async def test_unknown_user_still_runs_a_full_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = passwords._hasher

    class Spy:
        def verify(self, stored: str, password: str) -> bool:
            seen.append(stored)
            return bool(real.verify(stored, password))

    monkeypatch.setattr(passwords, "_hasher", Spy())
    assert not await passwords.verify_password(None, "whatever password")
    assert seen == [passwords._DUMMY_HASH]
