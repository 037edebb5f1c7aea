"""The web-session proxy: `ANY /k8s/{workspace_id}/{kubernetes path}`.

Request flow (gate): authenticate the caller (session cookie with a
session-bound CSRF token for writes and an exact Origin for upgrades, or a
bearer token) -> the workspace must be usable by the caller
(provisioning.access) -> the tenant wall (routing) decides on the raw path
before anything leaves the process -> the decision becomes an immutable
Ticket (ticket) -> the relay for it (relaying for HTTP, websockets for
exec/attach/port-forward) gets the Ticket and the relay service (relay):
a cached tenant token is attached (proxy.passthrough.token_cache), the request sent,
and an upstream failure mapped to the error tree in one place (upstream).

Trust boundaries: the client's identity headers never travel upstream
(headers); the upstream client (upstream: the HTTP/1.1 pool of http1, which
also makes WebSocket upgrades) holds only the cluster's CA, never the
gateway's own credential, which lives in provisioning.kube.client. After an
upgrade the two connections are spliced as bytes (websockets).

Streaming: bodies are never buffered whole or decompressed; long-running
requests (watch, follow, exec) have no total or read timeout and register
with the stream registry (streams), which suspension uses to cut them on
every replica, driven by PostgreSQL NOTIFY (tenants).

Cost in steady state: a proxied request makes no TokenRequest and no
database query: sessions, workspaces and tokens are all cached, and every
cache is invalidated by events rather than by time.
"""
