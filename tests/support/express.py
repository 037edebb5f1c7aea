"""Helpers for tests of the express lane: a recording FAKE API server, a
gateway whose GET is warm, and the lane's own count of answers."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy import keys
from tests.fakes.apiserver import FakeAPIServer
from tests.fakes.kube import FakeTokenIssuer
from tests.support.gatewayclient import provisioned_workspace

# What a client may send and the API server must never see (proxy.passthrough.headers).
HOSTILE = {"Impersonate-User": "system:admin", "Impersonate-Group": "system:masters", "X-Remote-User": "admin",
           "X-Forwarded-For": "10.0.0.1", "Forwarded": "for=10.0.0.1", "X-Real-IP": "10.0.0.1",
           "Audit-Id": "chosen", "X-CSRF-Token": "x", "Referer": "https://evil.example/",
           "Proxy-Authorization": "Basic eA==", "TE": "trailers", "Keep-Alive": "timeout=5"}


def express_answers(gateway: Any) -> int:
    counted: int = gateway.server.app[keys.METRICS]._express_answers  # since the last scrape: never scraped here
    return counted


def by_the_lane(express_lane: bool, answers: int) -> int:
    """How many of `answers` the lane gives: all of them, or none when it is off."""
    return answers if express_lane else 0


async def recording_api_server(fake_api_server: FakeAPIServer, answer: Any = None,
                               targets: list[str] | None = None) -> tuple[list[dict[str, str]], Any]:
    """A FAKE API server keeping the headers (and in `targets`, the path and
    query) of each request, answering an empty list or with `answer`."""
    seen: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.headers))
        if targets is not None:
            targets.append(request.path_qs)
        if answer is not None:
            answered: web.StreamResponse = await answer(request)
            return answered
        return web.json_response({"kind": "ConfigMapList", "items": []}, headers={"Audit-Id": "server-made",
                                                                                  "Set-Cookie": "a=b"})

    server, upstream = await fake_api_server(handler)
    return seen, (server, upstream)


async def warm_gateway(make_gateway: Any, fake_api_server: FakeAPIServer, answer: Any = None,
                       targets: list[str] | None = None) -> tuple[list[dict[str, str]], Any, Any, str, str]:
    """A gateway before a recording FAKE API server, a signed-in user whose
    GET of `path` is warm (the lane takes the next), and the user's
    Authorization header line: (seen, gateway, user, path, authorization)."""
    seen, (_server, upstream) = await recording_api_server(fake_api_server, answer, targets)
    gateway = await make_gateway(kube=FakeTokenIssuer(), upstream=upstream)
    user, path = await provisioned_workspace(gateway)
    assert (await gateway.get(path, headers=user.bearer)).status == 200
    seen.clear()
    if targets is not None:
        targets.clear()
    return seen, gateway, user, path, f"Authorization: {user.bearer['Authorization']}\r\n"
