"""Keycloak's admin API, as an organisation's administrator uses it: a
realm's group memberships changed while the gateway runs (the realm
import fixes them at start, devstack.keycloak)."""

from __future__ import annotations

import contextlib
import json
import urllib.parse
import urllib.request
from typing import Any, Iterator


def _admin_token(keycloak: Any) -> str:
    body = urllib.parse.urlencode({"grant_type": "password", "client_id": "admin-cli", "username": "admin",
                                   "password": keycloak.admin_password}).encode()
    with urllib.request.urlopen(f"{keycloak.base_url}/realms/master/protocol/openid-connect/token", body,
                                timeout=60) as answer:
        return str(json.loads(answer.read())["access_token"])


def _call(keycloak: Any, method: str, path: str) -> Any:
    request = urllib.request.Request(f"{keycloak.base_url}/admin/realms/{path}", method=method,
                                     headers={"Authorization": f"Bearer {_admin_token(keycloak)}"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        text = answer.read()
    return json.loads(text) if text else None


def _membership_path(keycloak: Any, realm: str, username: str, group: str) -> str:
    users = _call(keycloak, "GET", f"{realm}/users?exact=true&username={urllib.parse.quote(username)}")
    groups = _call(keycloak, "GET", f"{realm}/groups?exact=true&search={urllib.parse.quote(group)}")
    user_id = next(u["id"] for u in users if u["username"] == username)
    group_id = next(g["id"] for g in groups if g["name"] == group)
    return f"{realm}/users/{user_id}/groups/{group_id}"


def leave_group(keycloak: Any, realm: str, username: str, group: str) -> None:
    _call(keycloak, "DELETE", _membership_path(keycloak, realm, username, group))


def join_group(keycloak: Any, realm: str, username: str, group: str) -> None:
    _call(keycloak, "PUT", _membership_path(keycloak, realm, username, group))


@contextlib.contextmanager
def out_of_group(keycloak: Any, realm: str, username: str, group: str) -> Iterator[None]:
    """The user out of the group for the block's duration; back in after,
    whatever happens (the realm is the whole test session's)."""
    leave_group(keycloak, realm, username, group)
    try:
        yield
    finally:
        join_group(keycloak, realm, username, group)
