"""`tenant-gateway reconcile`'s report (provisioning.reconciling) against a
FAKE cluster and a FAKE database: faults on cue, at the step of one
workspace, that a real PostgreSQL cannot be made to produce there. The
cluster ring runs the command itself (tests/integration/test_cli.py)."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any, AsyncIterator

import pytest

from provisioning import manifests, reconciling
from provisioning.db import members as member_rows
from provisioning.db import repositories as repo
from provisioning.errors import DatabaseUnavailable
from provisioning.models import AuditEvent, Member, Workspace
from provisioning.tiers import DEFAULT_TIERS


class FakeKube:
    """Every object is created anew; each namespace is found as its tier says."""

    def __init__(self, *workspaces: Workspace) -> None:
        self.owners = {w.namespace: str(w.id) for w in workspaces}

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return body

    async def get(self, path: str) -> dict[str, Any]:
        name = path.rsplit("/", 1)[-1]
        return manifests.namespace(name, self.owners[name])

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return patch

    async def list_pages(self, path: str, *, page_size: int = 500,
                         label_selector: str | None = None) -> AsyncIterator[list[dict[str, Any]]]:
        """No member's RoleBinding anywhere."""
        yield []


def _workspace(number: int) -> Workspace:
    return Workspace(uuid.uuid4(), uuid.uuid4(), f"tenant-{number}", "sa-tenant-admin", "basic", "provisioned",
                     datetime.datetime(2024, 1, number, tzinfo=datetime.timezone.utc))


async def test_a_database_gone_at_an_audit_row_ends_the_run_there_with_everything_done_so_far_reported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    first, second, third = (_workspace(n) for n in (1, 2, 3))
    recorded: list[uuid.UUID] = []

    async def every_workspace(_db: object) -> AsyncIterator[Workspace]:
        for workspace in (first, second, third):
            yield workspace

    async def all_members(_db: object, _workspace_id: uuid.UUID) -> list[Member]:
        return []  # the owners' rows: their accounts are the workspaces' own, made by onboarding

    async def record_audit(_db: object, event: AuditEvent) -> uuid.UUID:
        if event.workspace_id == second.id:
            raise DatabaseUnavailable()
        recorded.append(event.workspace_id)  # type: ignore[arg-type]
        return uuid.uuid4()

    monkeypatch.setattr(repo, "every_workspace", every_workspace)
    monkeypatch.setattr(repo, "record_audit", record_audit)
    monkeypatch.setattr(member_rows, "all_members", all_members)
    report = await reconciling.reconcile(object(), FakeKube(first, second, third), DEFAULT_TIERS,  # type: ignore[arg-type]
                                         cluster_role="tenant-admin", concurrency=1)
    assert [line.workspace for line in report] == [first, second]  # the third was not tried
    assert recorded == [first.id]
    assert report[0].converged and not report[0].stopped
    assert report[1].stopped and not report[1].converged
    # What was done to the second is on the report, since its audit row is not.
    assert report[1].changes[:-1] == report[0].changes and report[0].changes
    assert report[1].changes[-1] == ("stopped here: the audit row of these changes was not written "
                                     "(the database is unreachable; retry later)")


async def test_workspaces_converged_at_once_are_reported_in_creation_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first workspace's cluster answers last; its line still comes
    first, and no more than `concurrency` are under way at once."""
    workspaces = [_workspace(n) for n in range(1, 8)]
    under_way = most = 0

    class SlowFirst(FakeKube):
        async def get(self, path: str) -> dict[str, Any]:
            nonlocal under_way, most
            under_way += 1
            most = max(most, under_way)
            try:
                await asyncio.sleep(0.05 if path.endswith("/tenant-1") else 0)
                return await super().get(path)
            finally:
                under_way -= 1

    async def every_workspace(_db: object) -> AsyncIterator[Workspace]:
        for workspace in workspaces:
            yield workspace

    async def all_members(_db: object, _workspace_id: uuid.UUID) -> list[Member]:
        return []

    async def record_audit(_db: object, event: AuditEvent) -> uuid.UUID:
        return uuid.uuid4()

    monkeypatch.setattr(repo, "every_workspace", every_workspace)
    monkeypatch.setattr(repo, "record_audit", record_audit)
    monkeypatch.setattr(member_rows, "all_members", all_members)
    report = await reconciling.reconcile(object(), SlowFirst(*workspaces), DEFAULT_TIERS,  # type: ignore[arg-type]
                                         cluster_role="tenant-admin", concurrency=3)
    assert [line.workspace for line in report] == workspaces  # each was given its tier's objects, in order
    assert most == 3
