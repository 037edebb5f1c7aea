"""Given open proxied streams on two gateway replicas sharing one database,
when the right that opened them ends (logout of that session, suspension of
the user), then every one of them ends within 5 s on every replica, and
nobody else's stream is touched. (Session expiry is a timer on the replica
holding the stream: tests/unit/test_streams.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support.gatewayclient import admin_session, login
from tests.support.gatewayclient import tenant
from tests.support.watches import open_watch, until_closed

pytestmark = pytest.mark.cluster
async def watches_on_both(gateway: Any, replica: str, user: Any, workspace: dict[str, Any]) -> list[asyncio.Task[float]]:
    streams = [await open_watch(gateway, user, workspace), await open_watch(gateway, user, workspace, base=replica)]
    return [asyncio.create_task(until_closed(stream, 10)) for stream in streams]


async def test_logout_ends_that_sessions_streams_on_every_replica(gateway: Any, second_gateway: str) -> None:
    user, workspace = await tenant(gateway)
    other_session = await login(gateway, user.email)
    bystander, bystander_workspace = await tenant(gateway)
    closing = await watches_on_both(gateway, second_gateway, user, workspace)
    kept = await watches_on_both(gateway, second_gateway, other_session, workspace)
    untouched = await watches_on_both(gateway, second_gateway, bystander, bystander_workspace)
    assert (await user.call("POST", "/api/v1/auth/logout")).status == 204
    assert all(seconds < 5 for seconds in await asyncio.gather(*closing))
    # The same user's other session, and another user, keep theirs.
    for task in kept + untouched:
        assert not task.done()
        task.cancel()
    await asyncio.gather(*kept, *untouched, return_exceptions=True)


async def test_suspending_a_user_ends_all_their_streams_on_every_replica(
        gateway: Any, second_gateway: str, database_url: str) -> None:
    user, workspace = await tenant(gateway)
    bystander, bystander_workspace = await tenant(gateway)
    closing = await watches_on_both(gateway, second_gateway, user, workspace)
    untouched = await watches_on_both(gateway, second_gateway, bystander, bystander_workspace)
    root = await admin_session(gateway, database_url)
    assert (await root.call("POST", f"/api/v1/users/{user.user_id}/suspend")).status == 200
    assert all(seconds < 5 for seconds in await asyncio.gather(*closing))
    for task in untouched:
        assert not task.done()
        task.cancel()
    await asyncio.gather(*untouched, return_exceptions=True)
