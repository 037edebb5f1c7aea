"""Which counter a login's email is held to. Pure."""

from __future__ import annotations

import uuid

from proxy.routes.accounts import login_counter

ACCOUNT = uuid.UUID(int=7)


def test_every_spelling_that_finds_an_account_counts_against_that_account() -> None:
    # PostgreSQL's lower() finds alice's account for `alİce`, where Python's
    # lower() gives another text: both are one counter.
    assert login_counter(ACCOUNT, "alice@example.test") == login_counter(ACCOUNT, "al\u0130ce@example.test") \
        == f"account:{ACCOUNT}"


def test_an_email_that_finds_nothing_counts_by_its_text_and_never_as_an_account() -> None:
    assert login_counter(None, " Bob@Example.Test ") == "email:bob@example.test"
    assert login_counter(None, f"account:{ACCOUNT}") != login_counter(ACCOUNT, "")
