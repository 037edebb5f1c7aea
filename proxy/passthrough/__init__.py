"""The web-session proxy: `ANY /k8s/{workspace_id}/{kubernetes path}`.

Two paths, one decision. The commonest request, a warm bearer GET, is
answered by the express lane (express) beneath aiohttp's server. Everything
else takes aiohttp's full path through the gate (gate). Both ask the gate's
one decision, `Gate.decide`: the workspace must be usable by the caller
(provisioning.access), and the tenant wall (routing) decides on the raw path
before anything leaves the process. What passes becomes an immutable Ticket
(ticket). The lane decides from its caches alone; when they are cold, or the
answer is a refusal, it lends the request to the full path, which fills the
caches and decides again. tests/component/test_lane_parity.py sends one table
of requests through both and compares the answers.

On the full path the caller is authenticated first (a session cookie with a
session-bound CSRF token for writes and an exact Origin for upgrades, or a
bearer token). After the decision, the relay for the request (relaying for
HTTP, websockets for exec/attach/port-forward) gets the Ticket and the relay
service (relay). A cached tenant token is attached (token_cache), the
request is sent, and an upstream failure is mapped to the error tree in one
place (upstream). The lane uses the same relay service and the same mapping.

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
