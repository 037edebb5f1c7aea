"""The API server's side of the audit webhook, for tests: certificates
(devstack.pki), EventLists shaped as the webhook backend sends them, and a
POST with or without a client certificate."""

from __future__ import annotations

import ssl
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from devstack import pki

CREDENTIAL_ID_KEY = "authentication.kubernetes.io/credential-id"


@dataclass(frozen=True)
class AuditPki:
    """A CA, the listener's serving pair, a client pair from the CA, and a
    client pair from another CA (the wrong certificate)."""

    ca: Path
    server: tuple[Path, Path]
    client: tuple[Path, Path]
    stranger: tuple[Path, Path]

    def env(self, listen: str = "127.0.0.1:0") -> dict[str, str]:
        return {"GATEWAY_AUDIT_LISTEN": listen, "GATEWAY_AUDIT_TLS_CERT_FILE": str(self.server[0]),
                "GATEWAY_AUDIT_TLS_KEY_FILE": str(self.server[1]), "GATEWAY_AUDIT_CLIENT_CA": str(self.ca)}


def make_audit_pki(folder: Path) -> AuditPki:
    ca, ca_key = pki.make_ca("audit-test-ca")
    ca_file, _ = ca.write(folder, "ca")
    server = pki.issue(ca, ca_key, common_name="audit", server_hosts=("127.0.0.1", "localhost")).write(folder, "server")
    client = pki.issue(ca, ca_key, common_name="kube-apiserver-audit").write(folder, "client")
    other, other_key = pki.make_ca("someone-else")
    stranger = pki.issue(other, other_key, common_name="kube-apiserver-audit").write(folder, "stranger")
    return AuditPki(ca_file, server, client, stranger)


def event(*, verb: str = "create", resource: str = "configmaps", namespace: str | None = None,
          name: str | None = None, jti: str | None = None, code: int = 201, audit_id: str | None = None,
          stage: str = "ResponseComplete", time: str = "2025-06-01T10:00:00.000000Z", received: str | None = None,
          username: str = "system:serviceaccount:ns:member", padding: int = 0) -> dict[str, Any]:
    """One metadata-level event at stage time `time` of a request received at
    `received` (by default `time`: a request's stages share it); `padding`
    characters of requestURI make it bigger."""
    extra = {CREDENTIAL_ID_KEY: [f"JTI={jti}"]} if jti else {}
    return {
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": audit_id or str(uuid.uuid4()),
        "stage": stage, "requestURI": f"/api/v1/namespaces/{namespace}/{resource}?x={'a' * padding}", "verb": verb,
        "user": {"username": username, "groups": ["system:serviceaccounts"], "extra": extra},
        "sourceIPs": ["192.0.2.1", "127.0.0.1"], "userAgent": "kubectl/v1.34.0 (test)",
        "objectRef": {"resource": resource, "namespace": namespace, "name": name, "apiVersion": "v1"},
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": received or time, "stageTimestamp": time,
    }


def event_list(*events: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": list(events)}


def client_context(ca: Path, pair: tuple[Path, Path] | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if pair is not None:
        context.load_cert_chain(*pair)
    return context


async def post(address: tuple[str, int], context: ssl.SSLContext, body: Any, *, path: str = "/audit",
               raw: bytes | None = None) -> int:
    """POST a batch as the webhook backend does; the answer's status.
    A refused handshake raises aiohttp.ClientError."""
    url = f"https://{address[0]}:{address[1]}{path}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        if raw is not None:
            answer = await session.post(url, data=raw, ssl=context, headers={"Content-Type": "application/json"})
        else:
            answer = await session.post(url, json=body, ssl=context)
        async with answer:
            await answer.read()
            return answer.status
