"""The OpenAPI 3.1 document of the gateway's own API, served at
/api/v1/openapi.json. Kept true by tests/integration/test_operations.py, which
compares it with the routes the application actually registers."""

from __future__ import annotations

import copy
from typing import Any

from aiohttp import web

from proxy import keys
from proxy.auth.passwords import MAX_LENGTH, MIN_LENGTH

routes = web.RouteTableDef()

_ERROR = {"$ref": "#/components/responses/Error"}
_KUBERNETES_ERROR = {"$ref": "#/components/responses/KubernetesError"}
_SESSION: list[dict[str, list[str]]] = [{"bearer": []}, {"cookie": []}]


def _op(summary: str, ok: int, *, body: str | None = None, auth: bool = True, errors: tuple[int, ...] = (),
        ok_type: str = "application/json", params: list[dict[str, Any]] | None = None,
        also_ok: dict[int, str] | None = None, ok_schema: str | None = None) -> dict[str, Any]:
    content = {"schema": {"$ref": f"#/components/schemas/{ok_schema}"}} if ok_schema else {}
    operation: dict[str, Any] = {
        "summary": summary,
        "responses": {str(ok): {"description": "success", "content": {ok_type: content}} if ok != 204 else {"description": "success"}},
    }
    for status, description in (also_ok or {}).items():
        operation["responses"][str(status)] = {"description": description, "content": {ok_type: {}}}
    for status in errors:
        operation["responses"][str(status)] = _ERROR
    if auth:
        operation["security"] = _SESSION
        operation["responses"].setdefault("401", _ERROR)
    if body:
        operation["requestBody"] = {"required": body not in ("InitRequest", "DeviceStart"),
                                    "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}}}
    if params:
        operation["parameters"] = params
    return operation


def _k8s_errors(operation: dict[str, Any]) -> dict[str, Any]:
    """The gateway's own refusals on /k8s are also Kubernetes Status objects."""
    for status, response in operation["responses"].items():
        if response is _ERROR:
            operation["responses"][status] = _KUBERNETES_ERROR
    return operation


def _path_id(name: str = "id") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}


def _path_name() -> dict[str, Any]:
    return {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, schema_type: str = "string", *, fmt: str | None = None) -> dict[str, Any]:
    schema = {"type": schema_type} | ({"format": fmt} if fmt else {})
    return {"name": name, "in": "query", "required": False, "schema": schema}


DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "tenant-gateway", "version": "1"},
    "paths": {
        "/api/v1/auth/register": {"post": _op("Create an account", 201, body="Credentials", auth=False,
                                              errors=(400, 403, 409, 429, 503))},
        "/api/v1/auth/login": {"post": _op("Log in: session token, cookies and CSRF token", 200, body="Credentials",
                                           auth=False, errors=(400, 401, 429, 503))},
        "/api/v1/auth/logout": {"post": _op("End the session everywhere", 204, errors=(403, 503))},
        "/api/v1/auth/providers": {"get": _op("The identity providers one may sign in with", 200, auth=False)},
        "/api/v1/auth/oidc/{name}/login": {"get": _op(
            "Start signing in with a provider: 302 to it (authorization code, PKCE S256, state, nonce)", 302,
            auth=False, ok_type="text/plain", errors=(404, 429, 503),
            params=[_path_name(), _query("next")])},
        "/api/v1/auth/oidc/{name}/callback": {"get": _op(
            "The provider's answer: session cookies and 302 to next", 302, auth=False, ok_type="text/plain",
            errors=(401, 404, 429, 503), params=[_path_name(), _query("state"), _query("code")])},
        "/api/v1/auth/device": {"post": _op(
            "Start device sign-in (the command line): a user code to be typed at verification_uri "
            "(no verification_uri_complete: a link carries no code)", 200, body="DeviceStart",
            auth=False, errors=(400, 415, 429, 503))},
        "/api/v1/auth/device/lookup": {"post": _op(
            "What asked for a typed user code: its self-declared client_name, client_address, started_at, "
            "expires_at (counts as an attempt)", 200, body="DeviceApproval", errors=(400, 403, 415, 429, 503))},
        "/api/v1/auth/device/approve": {"post": _op(
            "Approve a typed user code as the caller: the device's session may only mint workspace credentials",
            204, body="DeviceApproval", errors=(400, 403, 415, 429, 503))},
        "/api/v1/auth/device/token": {"post": _op(
            "Poll: 400 authorization_pending until approved, then a session (once)", 200, body="DeviceToken",
            auth=False, errors=(400, 415, 503))},
        "/api/v1/me": {"get": _op("The caller and every workspace they are a member of, each with their role", 200,
                                  errors=(403, 503))},
        "/api/v1/workspaces/init": {"post": _op(
            "Onboard the caller's workspace (idempotent) on a cluster: the one asked for (`cluster`, which the tier "
            "must allow: unknown 400 unknown_cluster, not allowed 403 cluster_not_allowed), else among those the tier "
            "allows (narrowed by `labels`) the shared cluster with the fewest workspaces, or for a dedicated tier a "
            "free dedicated cluster (none free: 409 no_free_cluster). A repeat never moves it", 201,
            body="InitRequest", errors=(400, 403, 409, 429, 503),
                                                also_ok={200: "already onboarded: the same workspace"})},
        "/api/v1/workspaces": {"get": _op("The workspaces the caller is a member of, each with their role "
                                          "(all=true: every workspace, gateway admins). With all=true, `limit` "
                                          "(1-500, default 100) and `cursor` page it in creation order: the answer "
                                          "is then `{\"items\": [...], \"next\": cursor or null}`", 200,
                                          errors=(400, 403),
                                          params=[_query("all", "boolean"), _query("limit", "integer"),
                                                  _query("cursor")])},
        "/api/v1/workspaces/{id}": {"get": _op("One workspace", 200, errors=(403, 404), params=[_path_id()])},
        "/api/v1/workspaces/credentials/kubeconfig": {"get": _op(
            "Issue a 2-hour kubeconfig of the caller's own ServiceAccount in the workspace (workspace_id: any "
            "they are a member of; default: the one they own), with its cluster's public server and CA. "
            "all=true: one file with a context per workspace the caller may use now, named `<cluster>/<namespace>`, "
            "each with its own cluster and user entries of that name and its own credential (each issued and "
            "audited as one kubeconfig is); a workspace whose cluster is down is left out and named in a comment",
            200, ok_type="application/x-yaml", errors=(400, 403, 404, 409, 503),
            params=[_query("workspace_id"), _query("format"), _query("all", "boolean")])},
        "/api/v1/workspaces/credentials/token": {"get": _op(
            "Issue the kubeconfig's 2-hour token as JSON (kubectl's exec plugin), with the workspace's `cluster` "
            "and its public `server` and `certificate_authority_data`", 200, errors=(403, 404, 409, 503),
            params=[_query("workspace_id")])},
        "/api/v1/clusters": {"get": _op(
            "The clusters this gateway serves (gateway admins): name, labels, kind (shared or dedicated), "
            "reachable now, API server version (null when unreachable), how many workspaces it holds, and the "
            "workspace holding a dedicated one (dedicated_to)", 200, errors=(403, 503))},
        "/api/v1/workspaces/{id}/members": {
            "get": _op("The workspace's members (with pending invitations, status invited) and group bindings "
                       "(any member; others 404)", 200, errors=(403, 404, 503), params=[_path_id()]),
            "post": _op("Invite an email (the same answer whether or not it has an account: accepted when an "
                        "account of that provider-verified email signs in) or bind a provider's group "
                        "(workspace admins)", 201, body="MemberRequest", errors=(400, 403, 404, 409, 415, 503),
                        params=[_path_id()])},
        "/api/v1/workspaces/{id}/members/{user_id}": {
            "patch": _op("Change a member's role: the old binding goes before the new one is made (workspace "
                         "admins; the owner and the last admin stay admins: 409)", 200, body="RoleRequest",
                         errors=(400, 403, 404, 409, 415, 503), params=[_path_id(), _path_id("user_id")]),
            "delete": _op("Remove a member, or leave: their ServiceAccount is deleted, so every token of it "
                          "stops authenticating, and their streams end (workspace admins; any member for "
                          "themselves; the owner and the last admin stay: 409)", 204,
                          errors=(403, 404, 409, 503), params=[_path_id(), _path_id("user_id")])},
        "/api/v1/workspaces/{id}/invitations/{email}": {"delete": _op(
            "Cancel an invitation (workspace admins)", 204, errors=(400, 403, 404, 503),
            params=[_path_id(), {"name": "email", "in": "path", "required": True, "schema": {"type": "string"}}])},
        "/api/v1/workspaces/{id}/groups/{provider}/{group}": {"delete": _op(
            "Unbind a provider's group, and remove the members it made (workspace admins)", 204,
            errors=(400, 403, 404, 503), params=[_path_id(), *(
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in ("provider", "group"))])},
        "/api/v1/credentials": {"get": _op(
            "Issued kubeconfigs and tokens, newest first (at most 500): the caller's own; with workspace_id, a "
            "workspace admin's whole workspace; gateway admins all. Each with issued/expires/revoked times, "
            "address, user agent and last use; never the token", 200, errors=(400, 403, 503),
            params=[_query("workspace_id", fmt="uuid"), _query("user_id", fmt="uuid")])},
        "/api/v1/credentials/{id}": {"delete": _op(
            "Revoke one credential: its binding Secret is deleted and the API server refuses the token "
            "(after at most its own ~10 s authentication cache). Own credentials, a workspace admin's "
            "workspace, gateway admins: others 404", 204, errors=(403, 404, 503), params=[_path_id()])},
        "/api/v1/activity": {"get": _op(
            "The activity timeline, newest first: the gateway's own audit rows (source gateway, action the audit "
            "action) merged with the API server's audit events of credentials it issued and of requests made "
            "through its proxy (source cluster: verb, resource, subresource, namespace, name, response code, user "
            "agent; user_id null for a token the gateway did not issue, in a tenant namespace). Each item's `via` "
            "says how it came: `kubeconfig` or `token` (an issued credential, straight at the API server), `proxy` "
            "(through the gateway's proxy: web session, console, kubectl pointed at the gateway), `gateway` (the "
            "gateway's own API), null (unattributed); `audit_id` is the API server's auditID of a cluster item "
            "(any string: a client talking straight to the API server may choose it, so it need not be a UUID and "
            "may repeat another request's; every request is an item of its own all the same), "
            "or of the event a ProxyWrite or ProxyExec row was sent as. Each action is shown once: a proxied "
            "write is its cluster event once that is stored (its ProxyWrite row stays in /api/v1/audit), and a "
            "long request's two stages are one item. The caller's own; with workspace_id, a workspace admin's "
            "whole workspace; gateway admins all. Paged: pass `next` back as cursor (null: the last page)",
            200, errors=(400, 403, 503), ok_schema="ActivityPage",
            params=[_query("workspace_id", fmt="uuid"), _query("user_id", fmt="uuid"),
                    _query("since", fmt="date-time"), _query("limit", "integer"), _query("cursor")])},
        "/api/v1/roles": {"get": _op("The member roles, their ClusterRoles and what each may do, in words", 200,
                                     errors=(403,))},
        "/api/v1/workspaces/{id}/suspend": {"post": _op("Suspend a workspace (admin)", 200, errors=(403, 404, 409, 503),
                                                        params=[_path_id()])},
        "/api/v1/workspaces/{id}/resume": {"post": _op(
            "Resume a workspace (admin); waits ~15 s for the API server's token cache", 200,
            errors=(403, 404, 409, 503), params=[_path_id()])},
        "/api/v1/users/{id}/suspend": {"post": _op(
            "Suspend a user: every session ends at once, and their ServiceAccount in every workspace they "
            "belong to is deleted (admin)", 200,
                                                   errors=(403, 404, 503), params=[_path_id()])},
        "/api/v1/users/{id}/resume": {"post": _op("Let a suspended user log in again (admin)", 200,
                                                  errors=(403, 404, 503), params=[_path_id()])},
        "/api/v1/audit": {"get": _op(
            "Audit rows, newest first (admin), each with its person's `email` where known (else null). "
            "`email` filters by person (case-insensitive); `limit` 1-1000, default 200; the next page: "
            "`before` = the last row's `created_at` and `id` joined by a comma (rows strictly older; "
            "malformed: 400 invalid_cursor)", 200, errors=(400, 403), params=[
            _query("workspace_id", fmt="uuid"), _query("user_id", fmt="uuid"), _query("email"), _query("action"),
            _query("limit", "integer"), _query("before")])},
        "/api/v1/openapi.json": {"get": _op("This document", 200, auth=False)},
        "/": {"get": _op("The web console (its page)", 200, auth=False, ok_type="text/html")},
        "/device": {"get": _op("The web console's page for approving a device sign-in (verification_uri)", 200,
                               auth=False, ok_type="text/html")},
        "/console/{name}": {"get": _op("The web console's scripts and style", 200, auth=False, ok_type="text/javascript",
                                       errors=(404,), params=[
            {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}])},
        "/healthz": {"get": _op("Liveness", 200, auth=False)},
        "/readyz": {"get": _op(
            "Readiness: database and API server reachable (database events reported, not required). With several "
            "clusters, ready while the database answers: unreachable clusters are listed in `degraded` (status "
            "degraded, 200) and in checks.clusters; their workspaces answer 503 naming them", 200,
            auth=False, errors=(503,))},
        "/k8s/{workspace_id}/{path}": {method: _k8s_errors(_op(
            "The Kubernetes API of the workspace, walled to its namespace", 200, errors=(400, 403, 404, 429, 502, 503),
            params=[_path_id("workspace_id"), {"name": "path", "in": "path", "required": True, "schema": {"type": "string"}}])
            ) for method in ("get", "head", "post", "put", "patch", "delete")},
    },
    "components": {
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "description": (
                "the token from login; a device sign-in's token may only call the credential routes and "
                "logout (403 credentials_only elsewhere, the /k8s/ proxy included)")},
            "cookie": {"type": "apiKey", "in": "cookie", "name": "gw_session",
                       "description": "writes also need X-CSRF-Token equal to the gw_csrf cookie"},
        },
        "schemas": {
            "Credentials": {"type": "object", "required": ["email", "password"], "properties": {
                "email": {"type": "string", "format": "email"},
                "password": {"type": "string", "minLength": MIN_LENGTH, "maxLength": MAX_LENGTH,
                             "description": "register also refuses passwords that are easy to guess "
                                            "(fewer than 4 distinct characters, or containing the email's name)"}}},
            "InitRequest": {"type": "object", "properties": {
                "tier": {"type": "string", "default": "basic"},
                "cluster": {"type": "string", "description": "a configured cluster's name (GET /api/v1/clusters)"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"},
                           "description": "labels the cluster must carry (e.g. {region: eu})"}}},
            "DeviceStart": {"type": "object", "properties": {
                "provider": {"type": "string"},
                "client_name": {"type": "string", "maxLength": 100,
                                "description": "how the client names itself, shown to the approver as its own claim "
                                               "(printable characters only)"}}},
            "MemberRequest": {"oneOf": [
                {"type": "object", "required": ["email", "role"], "properties": {
                    "email": {"type": "string", "format": "email", "maxLength": 254},
                    "role": {"enum": ["admin", "edit", "view"]},
                    "provider": {"type": "string", "description": "only a sign-in through this provider accepts"}}},
                {"type": "object", "required": ["group", "provider", "role"], "properties": {
                    "group": {"type": "string", "minLength": 1, "maxLength": 255},
                    "provider": {"type": "string"}, "role": {"enum": ["admin", "edit", "view"]}}}]},
            "RoleRequest": {"type": "object", "required": ["role"],
                            "properties": {"role": {"enum": ["admin", "edit", "view"]}}},
            "DeviceApproval": {"type": "object", "required": ["user_code"],
                               "properties": {"user_code": {"type": "string"}}},
            "DeviceToken": {"type": "object", "required": ["device_code"],
                            "properties": {"device_code": {"type": "string"}}},
            "ActivityPage": {"type": "object", "required": ["items", "next"], "properties": {
                "next": {"type": ["string", "null"], "description": "the cursor of the next page; null on the last"},
                "items": {"type": "array", "items": {"type": "object", "properties": {
                    "time": {"type": "string", "format": "date-time"},
                    "source": {"enum": ["gateway", "cluster"]},
                    "user_id": {"type": ["string", "null"], "format": "uuid"},
                    "workspace_id": {"type": ["string", "null"], "format": "uuid"},
                    "credential_id": {"type": ["string", "null"], "format": "uuid"},
                    "action": {"type": ["string", "null"], "description": "a gateway item's audit action"},
                    "verb": {"type": ["string", "null"]}, "resource": {"type": ["string", "null"]},
                    "subresource": {"type": ["string", "null"]}, "namespace": {"type": ["string", "null"]},
                    "name": {"type": ["string", "null"]}, "code": {"type": ["integer", "null"]},
                    "user_agent": {"type": ["string", "null"]},
                    "via": {"enum": ["kubeconfig", "token", "proxy", "gateway", None]},
                    "audit_id": {"type": ["string", "null"], "maxLength": 128,
                                 "description": "the API server's auditID, as it wrote it: any string (a client "
                                                "may set it with an Audit-ID header), not necessarily a UUID, "
                                                "cut to 128 characters"}}}}}},
            "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["code", "message"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}},
            # kubectl and the client libraries read any error body as a Status:
            # the gateway's own errors on /k8s are one as well, with the same message.
            "KubernetesError": {"allOf": [{"$ref": "#/components/schemas/Error"}, {
                "type": "object", "required": ["kind", "apiVersion", "metadata", "status", "message", "reason", "code"],
                "properties": {
                    "kind": {"const": "Status"}, "apiVersion": {"const": "v1"}, "metadata": {"type": "object"},
                    "status": {"const": "Failure"}, "message": {"type": "string"},
                    "reason": {"type": "string", "description": "the Kubernetes StatusReason of the HTTP status"},
                    "code": {"type": "integer"},
                    "details": {"type": "object", "properties": {"retryAfterSeconds": {"type": "integer"}}}}}]},
        },
        "responses": {
            "Error": {"description": "error", "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Error"}}}},
            "KubernetesError": {"description": "a refusal by the gateway: its error and a Kubernetes Status in one "
                                               "body (the API server's own errors are relayed as it sent them)",
                                "content": {"application/json": {
                                    "schema": {"$ref": "#/components/schemas/KubernetesError"}}}},
        },
    },
}


def document(tier_names: list[str]) -> dict[str, Any]:
    """The document as this deployment serves it: the tiers are configuration."""
    served = copy.deepcopy(DOCUMENT)
    served["components"]["schemas"]["InitRequest"]["properties"]["tier"]["enum"] = sorted(tier_names)
    return served


@routes.get("/api/v1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return web.json_response(document(list(request.app[keys.SETTINGS].tiers)))
