"""`serve`'s start-up self-check and the I/O around the pure comparisons in
test_permissions: `probe_permissions` against a FAKE KubeClient (faults and
cluster states a real API server cannot be made to produce on cue: a 429 on
one access review, a binding gone between two requests)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from provisioning.errors import GatewayError
from provisioning.kube.errors import from_status
from provisioning.permissions import (
    POLICIES,
    Permission,
    PermissionReport,
    probe_permissions,
    required_permissions,
    rolebinding_unproven,
    shipped_policies,
)
from proxy.cli import server as cli
from proxy.settings import Settings
from tests.support.permissions import as_installed, shipped_review

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

    async def delete(self, path: str) -> dict[str, Any]:
        return await self.request("DELETE", path)

    async def list_items(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return list((await self.request("GET", path)).get("items", []))

    async def close(self) -> None:
        pass


def _use(monkeypatch: pytest.MonkeyPatch, kube: FakeKube | GatewayError) -> None:
    async def from_kubeconfig(_path: object) -> FakeKube:
        if isinstance(kube, GatewayError):
            raise kube
        return kube
    monkeypatch.setattr(cli.KubeClient, "from_kubeconfig", from_kubeconfig)  # type: ignore[attr-defined]


_EXEC_USER = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "sh",
                       "args": ["-c", "echo 'refresh_token=Kq9sEcReT' >&2; exit 1"]}}
_OIDC_USER = {"auth-provider": {"name": "oidc", "config": {
    "client-id": "gw", "client-secret": "Kq9sEcReT", "id-token": "Kq9sEcReT", "refresh-token": "Kq9sEcReT",
    "idp-issuer-url": "https://127.0.0.1:1/"}}}


def _kubeconfig(user: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                       "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
                       "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                       "users": [{"name": "u", "user": user}]})


@pytest.mark.parametrize("text, kind", [
    (_kubeconfig(_EXEC_USER), "not a usable kubeconfig (ConfigException)"),  # the library quoted the plugin's stderr
    (_kubeconfig(_OIDC_USER), "not a usable kubeconfig (ValueError)"),  # an id-token that is not a JWT
    ('users: [{name: u, user: {token: "Kq9sEcReT}]\n', "not YAML (line 2, column 1, in what begins at line 1, column 33)"),
    ("just a string Kq9sEcReT\n", "not a usable kubeconfig (TypeError)"),
    ("- Kq9sEcReT\n", "not a usable kubeconfig (TypeError)"),
    (None, "no such file"),
])
def test_a_kubeconfig_that_cannot_be_used_is_one_line_naming_the_file_never_its_content(
        text: str | None, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """`check`, `serve` and `reconcile` print this line and stop; nor does
    the library log what the exec plugin said."""
    path = tmp_path / "kubeconfig"
    if text is not None:
        path.write_text(text)
    assert cli.cmd_check(Settings(kubeconfig=path)) == 2
    printed = capsys.readouterr()
    assert "Kq9sEcReT" not in printed.err + printed.out + caplog.text
    assert printed.err == f"error: cannot load the gateway's Kubernetes credential from {path}: {kind}\n"


def test_a_tls_certificate_and_key_that_do_not_load_stop_serve_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tls.crt").write_text("not a certificate\n")
    (tmp_path / "tls.key").write_text("not a key\n")
    with pytest.raises(SystemExit) as exit:
        cli._tls_context(Settings(tls_cert_file=tmp_path / "tls.crt", tls_key_file=tmp_path / "tls.key"))
    assert exit.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("tenant-gateway: GATEWAY_TLS_CERT_FILE and GATEWAY_TLS_KEY_FILE cannot be loaded: ")
    assert err.count("\n") == 1


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


def _status(code: int, reason: str) -> GatewayError:
    return from_status(code, json.dumps({"kind": "Status", "reason": reason, "message": reason}).encode())


class Cluster:
    """What the FAKE API server holds: tenant namespaces (Active, not
    suspended, in listing order) and the role each one's RoleBinding
    tenant-admin binds (absent: no binding). `confined`: the confinement
    policy refuses the gateway's dry-run writes."""

    def __init__(self, namespaces: list[str], bindings: dict[str, str], *, confined: bool = True) -> None:
        self.namespaces, self.bindings, self.confined = namespaces, bindings, confined
        self.required = set(required_permissions("tenant-admin"))
        self.patched: list[str] = []
        self.reviewed: list[str] = []
        self.check_secrets: list[str] = []
        """Secrets the check made for its delete probes and has not deleted yet."""

    async def __call__(self, method: str, path: str, body: Any, query: dict[str, str]) -> dict[str, Any]:
        rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/"
        if path.endswith("/selfsubjectaccessreviews"):
            a = body["spec"]["resourceAttributes"]
            asked = Permission(a["verb"], a["resource"], a["group"], a.get("subresource", ""), a.get("name", ""),
                               a.get("namespace", ""))
            return {"status": {"allowed": asked in self.required}}
        if path.endswith("/selfsubjectrulesreviews"):
            self.reviewed.append(body["spec"]["namespace"])
            return {"status": shipped_review()}
        if path.startswith("/apis/admissionregistration.k8s.io/"):
            kind = "policies" if path.endswith("policies") else "bindings"
            return {"items": [shipped[0 if kind == "policies" else 1] for shipped in _SHIPPED]}
        if method == "GET" and path == "/api/v1/namespaces":
            return {"items": [{"metadata": {"name": n}} for n in self.namespaces]}
        if method == "GET" and path.startswith(rbac):
            ns = path.removeprefix(rbac).split("/")[0]
            if ns not in self.bindings:
                raise _status(404, "NotFound")
            return {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": self.bindings[ns]}}
        if method == "POST" and path.endswith("/secrets") and body["metadata"]["name"].startswith("credential-check-"):
            self.check_secrets.append(path)  # the Secret check's delete probes aim at: made for real, then deleted
            return {}
        if method == "DELETE" and "/secrets/credential-check-" in path and query.get("dryRun") != "All":
            self.check_secrets.remove(path.rsplit("/", 1)[0])
            return {}
        assert query.get("dryRun") == "All", (method, path)
        if method == "PATCH" and path.startswith(rbac):
            self.patched.append(path)
            if path.removeprefix(rbac).split("/")[0] not in self.bindings:
                raise _status(404, "NotFound")
        if self.confined:
            raise _status(403, "Forbidden")
        return {}


def _shipped_policy_set() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    shipped = shipped_policies()
    for name, selector in POLICIES.items():
        match = {"namespaceSelector": selector} if selector is not None else {}
        out.append((as_installed(name, shipped[name]),
                    {"metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"],
                                                          "matchResources": match}}))
    return out


_SHIPPED = _shipped_policy_set()
_BINDING = "/apis/rbac.authorization.k8s.io/v1/namespaces/{}/rolebindings/tenant-admin"


async def _report(cluster: Cluster) -> PermissionReport:
    return await probe_permissions(FakeKube(cluster), "tenant-admin")  # type: ignore[arg-type]


async def test_the_rolebinding_probe_aims_at_a_namespace_that_holds_the_binding() -> None:
    """A tenant that deleted its own binding (tenant-a, listed first) does
    not make the probe pass on a NotFound: tenant-b's binding is patched."""
    cluster = Cluster(["tenant-a", "tenant-b"], {"tenant-b": "tenant-admin"})
    assert (await _report(cluster)).lines() == [
        "ok: the gateway's credential holds every permission it needs and nothing forbidden"]
    assert cluster.patched == [_BINDING.format("tenant-b")]
    assert sorted(cluster.reviewed) == ["kube-system", "tenant-b"]  # where RoleBindings could add rules
    cluster.confined = False
    assert "excessive: tenant RoleBindings can be changed (opened to everyone): ValidatingAdmissionPolicy " \
           "tenant-gateway-confined (deploy/kubernetes/admission.yaml) is not in force for this credential" \
           in (await _report(cluster)).lines()


@pytest.mark.parametrize("bindings", [{}, {"tenant-a": "view"}], ids=["none", "another role's"])
async def test_no_binding_to_patch_is_unproven_not_a_pass(bindings: dict[str, str]) -> None:
    """A binding of another role would be refused by RBAC (no bind on it)
    before admission: no proof either. Said; not refused, since a tenant
    can delete its own binding (the contract's pass: nothing forbidden held)."""
    cluster = Cluster(["tenant-a"], bindings)
    report = await _report(cluster)
    assert report.ok and not report.missing and not report.excessive
    assert report.lines()[:-1] == [f"unproven: {rolebinding_unproven(1, 'tenant-admin')}"]
    assert report.lines()[-1].startswith("ok: ")
    assert report.lines()[0].startswith(
        "unproven: not shown refused, the probe could not be made (none of the 1 tenant namespaces sampled holds "
        "RoleBinding tenant-admin of ClusterRole tenant-admin): tenant RoleBindings can be changed")
    assert cluster.patched == []


async def test_a_binding_gone_before_the_probe_is_unproven() -> None:
    cluster = Cluster(["tenant-a"], {"tenant-a": "tenant-admin"})

    async def then_gone(method: str, path: str, body: Any, query: dict[str, str]) -> dict[str, Any]:
        if method == "PATCH":
            cluster.bindings.clear()
        return await cluster(method, path, body, query)

    report = await probe_permissions(FakeKube(then_gone), "tenant-admin")  # type: ignore[arg-type]
    line, _ok = report.lines()
    assert line.startswith("unproven: not shown refused, the probe could not be made (Kubernetes API error 404 "
                           "NotFound"), line
    assert line.endswith("tenant RoleBindings can be changed (opened to everyone): ValidatingAdmissionPolicy "
                         "tenant-gateway-confined (deploy/kubernetes/admission.yaml) is not in force for this "
                         "credential"), line


async def test_before_the_first_tenant_there_is_nothing_to_aim_at() -> None:
    cluster = Cluster([], {})
    assert (await _report(cluster)).ok and cluster.patched == []


def test_serve_starts_on_an_unproven_probe_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    # The one tenant deleted its own RoleBinding: refusing to start for that
    # would hand every tenant a way to keep the gateway down.
    _use(monkeypatch, FakeKube(Cluster(["tenant-a"], {})))
    with caplog.at_level(logging.WARNING):
        cli._self_check(Settings(), allow_excess=False)
    (record,) = [r for r in caplog.records if r.getMessage() == "permission self-check: not refused, but worth a look"]
    assert [line.startswith("not shown refused") for line in record.unproven] == [True]  # type: ignore[attr-defined]


async def test_no_delete_may_read_a_secret_and_the_secret_aimed_at_is_deleted_after() -> None:
    """The check makes a binding Secret of its own to aim the delete probes
    at (one that does not exist answers NotFound before admission runs),
    and deletes it for real afterwards; each dry-run delete that would
    answer with the whole object must be refused."""
    cluster = Cluster(["tenant-a"], {"tenant-a": "tenant-admin"})
    assert (await _report(cluster)).ok
    assert cluster.check_secrets == []
    cluster.confined = False
    lines = (await _report(cluster)).lines()
    for how in ("an orphaning delete", "a foreground delete", "a dry-run delete"):
        assert f"excessive: a Secret can be read through delete ({how} answers with the whole object): " \
               "ValidatingAdmissionPolicy tenant-gateway-confined (deploy/kubernetes/admission.yaml) is not in " \
               "force for this credential" in lines, how
    assert "excessive: service-account-token Secrets can be created (filled with a token for any account): " \
           "ValidatingAdmissionPolicy tenant-gateway-confined (deploy/kubernetes/admission.yaml) is not in force " \
           "for this credential" in lines
    assert cluster.check_secrets == []


@pytest.mark.parametrize("extra", [["--with-keycloak"], ["--clusters", "2"]])
def test_dev_in_cluster_runs_one_cluster_without_keycloak(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Pods reach neither a Keycloak nor further control planes on the host's loopback."""
    args = cli.parser().parse_args(["dev", "--in-cluster", *extra])
    with pytest.raises(SystemExit) as exited:
        cli.cmd_dev(cli.load({"GATEWAY_SESSION_SECRET": "s" * 40}), args)
    assert exited.value.code == 2
    assert "--in-cluster runs one cluster without Keycloak" in capsys.readouterr().err


def test_no_session_secret_and_no_room_for_a_key_is_one_line(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """As in the image (a read-only root) without GATEWAY_SESSION_SECRET: one
    line naming what to set, never a traceback. (Root writes through file
    modes, so the data dir here is under a regular file.)"""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exited:
        cli.load({"GATEWAY_DATA_DIR": str(blocker / "state")})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "GATEWAY_SESSION_SECRET is not set" in err and "GATEWAY_DATA_DIR" in err, err
