"""Migrations only add, so the previous release keeps working on the new
schema during a rolling update (README, "Installing with Helm"): the new
pod migrates as it starts while the old replicas still serve.

A statement that removes, renames or retypes what the previous release's
queries use breaks those replicas until the rollout ends. Such a change
lands in two releases instead: stop using the column, then drop it. The
migrations written before this rule are listed with what they break.
"""

from __future__ import annotations

import re
from pathlib import Path

MIGRATIONS = Path(__file__).resolve().parents[2] / "provisioning" / "db" / "migrations"

BREAKING = re.compile(
    r"\bDROP\s+(COLUMN|TABLE)\b|\bRENAME\b|\bALTER\s+COLUMN\s+\w+\s+(SET\s+NOT\s+NULL|(SET\s+DATA\s+)?TYPE)\b",
    re.IGNORECASE)

KNOWN = {
    "0011_device_sign_in_context": "device_codes.user_code becomes its digest: a device sign-in started on an "
                                   "older replica fails until the rollout ends",
}
"""Migrations from before the rule, and what they break for the release before them."""


def _statements_without_comments(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", sql)


def test_migrations_only_add() -> None:
    breaking = {}
    for path in sorted(MIGRATIONS.glob("*.sql")):
        found = BREAKING.search(_statements_without_comments(path.read_text()))
        if found:
            breaking[path.stem] = found.group(0)
    assert set(breaking) <= set(KNOWN), (
        f"{sorted(set(breaking) - set(KNOWN))} would break the previous release's replicas during a rolling "
        f"update ({breaking}): add first, remove in a later release")
    assert set(KNOWN) <= set(breaking), "a known exception no longer breaks anything: take it off the list"


def test_the_pattern_finds_what_it_must() -> None:
    for statement in ("ALTER TABLE t DROP COLUMN c;", "DROP TABLE t;", "ALTER TABLE t RENAME COLUMN a TO b;",
                      "ALTER TABLE t ALTER COLUMN c SET NOT NULL;", "ALTER TABLE t ALTER COLUMN c TYPE bigint;",
                      "alter table t alter column c set data type text;"):
        assert BREAKING.search(statement), statement
    for statement in ("ALTER TABLE t ADD COLUMN c text;", "ALTER TABLE t ALTER COLUMN c DROP NOT NULL;",
                      "DROP TRIGGER x ON t;", "DROP INDEX i;", "CREATE TABLE t (dropped boolean);"):
        assert not BREAKING.search(statement), statement
