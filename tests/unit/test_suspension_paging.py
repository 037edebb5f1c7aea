"""Suspension deletes a namespace's RoleBindings a page at a time, however
many the tenant made: pure, against a fake API server (no I/O) that answers
KubeClient's own requests as the real one pages a list (`limit`,
`continue`, one snapshot for all of a listing's pages)."""

from __future__ import annotations

from typing import Any

from provisioning.kube.client import LIST_PAGE_SIZE, ClusterEndpoint, KubeClient
from provisioning.suspension import _delete_every_rolebinding

COLLECTION = "/apis/rbac.authorization.k8s.io/v1/namespaces/tenant-u/rolebindings"


class FakePagingApiServer(KubeClient):
    """A fake: KubeClient's paths and verbs answered from a dict of
    RoleBindings, lists paged as the API server pages them."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(None, ClusterEndpoint("https://fake.invalid", None))  # type: ignore[arg-type]
        self.bindings = set(names)
        self.snapshots: dict[str, list[str]] = {}
        self.list_queries: list[dict[str, str]] = []
        self.largest_answer = 0

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                      query: dict[str, str] | None = None,
                      content_type: str = "application/json") -> dict[str, Any]:
        if method == "DELETE":
            self.bindings.discard(path.rsplit("/", 1)[1])
            return {"kind": "Status", "status": "Success"}
        assert (method, path) == ("GET", COLLECTION)
        query = dict(query or {})
        self.list_queries.append(query)
        limit = int(query["limit"])  # never an unpaged list
        token = query.get("continue")
        snapshot = self.snapshots[token] if token else sorted(self.bindings)
        page, rest = snapshot[:limit], snapshot[limit:]
        self.largest_answer = max(self.largest_answer, len(page))
        metadata: dict[str, str] = {}
        if rest:
            metadata["continue"] = f"c{len(self.snapshots)}"
            self.snapshots[metadata["continue"]] = rest
        return {"kind": "RoleBindingList", "metadata": metadata,
                "items": [{"metadata": {"name": name}} for name in page]}


async def test_every_rolebinding_goes_and_no_answer_holds_more_than_a_page() -> None:
    names = [f"b-{n:04d}" for n in range(LIST_PAGE_SIZE * 3 + 7)]
    server = FakePagingApiServer(names)
    deleted = await _delete_every_rolebinding(server, "tenant-u")
    assert sorted(deleted) == names and not server.bindings
    assert server.largest_answer == LIST_PAGE_SIZE
    assert all(q["limit"] == str(LIST_PAGE_SIZE) for q in server.list_queries)
    # Four pages for the bindings, then one empty listing that ends it.
    assert [("continue" in q) for q in server.list_queries] == [False, True, True, True, False]


async def test_a_page_size_is_what_list_pages_asks_for() -> None:
    server = FakePagingApiServer([f"b-{n}" for n in range(5)])
    pages = [[item["metadata"]["name"] for item in page] async for page in server.list_pages(COLLECTION, page_size=2)]
    assert pages == [["b-0", "b-1"], ["b-2", "b-3"], ["b-4"]]


async def test_an_empty_namespace_is_one_request() -> None:
    server = FakePagingApiServer([])
    assert await _delete_every_rolebinding(server, "tenant-u") == []
    assert len(server.list_queries) == 1
