"""The HTTP edge of tenant-gateway: the aiohttp application, authentication,
the JSON API and the Kubernetes pass-through.

`proxy` may import `provisioning` (the domain: Kubernetes objects, database,
audit), never the reverse; `.importlinter` enforces it. Handlers are thin:
parse, authorise, call a provisioning function, render. Every failure is a
provisioning.errors.GatewayError, and every error answer is built once, by
proxy.http.error_answers.

The folders, top layer first (`.importlinter` checks that each imports only
those below it): cli/ (the console script), app.py (wiring), routes/ and
server/ (the JSON API; the process, its middleware and connections),
keys.py (the app's typed keys), passthrough/ (the Kubernetes proxy), auth/,
settings/, http/ (plumbing every route shares).

Words used across the code:
- answer: what the gateway sends back (a response, or an error answer).
- gate: the `/k8s/` route's decision (passthrough.gate); the wall is its
  tenant check on the path (passthrough.routing).
- ticket: a request that passed the gate, as an immutable value.
- lane: the express lane, which answers warm bearer GETs beneath aiohttp.
- lend: the lane hands one request to aiohttp's full path and takes the
  connection back after.
- cut: a stream ended by the gateway because a right ended (suspension,
  sign-out) or the process stops.
- drain: the first half of a graceful stop (http.draining).
- seam: a `create_app` argument tests use to put a FAKE in a real part's place.
"""
