"""`serve`'s start-up self-check and the I/O around the pure comparisons in
test_permissions: `probe_permissions` against a FAKE KubeClient (faults and
cluster states a real API server cannot be made to produce on cue: a 429 on
one access review, a binding gone between two requests)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import pytest

from provisioning.errors import GatewayError
from provisioning.kube.errors import from_status
from proxy import cli
from proxy.settings import Settings

Handler = Callable[[str, str, Any, dict[str, str]], Awaitable[dict[str, Any]]]


class FakeKube:
    """A FAKE KubeClient: `answer` decides every request; SelfSubjectAccessReviews
    are allowed when `allowed` says so."""

    def __init__(self, answer: Handler) -> None:
        self.answer = answer
        self.requests: list[tuple[str, str]] = []

    async def request(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None,
                      content_type: str = "application/json") -> dict[str, Any]:
        self.requests.append((method, path))
        return await self.answer(method, path, body, query or {})

    async def get(self, path: str) -> dict[str, Any]:
        return await self.request("GET", path)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body)

    async def list_items(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return list((await self.request("GET", path)).get("items", []))

    async def close(self) -> None:
        pass


def _use(monkeypatch: pytest.MonkeyPatch, kube: FakeKube | GatewayError) -> None:
    async def from_kubeconfig(_path: object) -> FakeKube:
        if isinstance(kube, GatewayError):
            raise kube
        return kube
    monkeypatch.setattr(cli.KubeClient, "from_kubeconfig", from_kubeconfig)


async def _refused_review(method: str, path: str, body: Any, query: dict[str, str]) -> dict[str, Any]:
    if path.endswith("/selfsubjectaccessreviews"):
        attributes = body["spec"]["resourceAttributes"]
        if (attributes["verb"], attributes["resource"]) == ("create", "namespaces"):
            raise from_status(429, b'{"kind": "Status", "reason": "TooManyRequests"}')
        return {"status": {"allowed": False}}
    return {"items": []}


@pytest.mark.parametrize("fault", [
    "unreachable", "429 on one access review", "credential refused (401)"])
def test_serve_refuses_to_start_when_the_check_cannot_run(
        fault: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    if fault == "unreachable":
        _use(monkeypatch, from_status(503, None))
    elif fault.startswith("429"):
        _use(monkeypatch, FakeKube(_refused_review))
    else:
        _use(monkeypatch, from_status(401, None))
    with pytest.raises(SystemExit) as exit:
        cli._self_check(Settings(), allow_excess=True)  # --allow-excess-permissions does not cover it
    assert exit.value.code == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("tenant-gateway: the permission self-check could not run (") and \
        line.endswith("); refusing to start"), line
