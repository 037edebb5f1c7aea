"""The HTTP edge of tenant-gateway: the aiohttp application, authentication,
the JSON API and the Kubernetes pass-through.

`proxy` may import `provisioning` (the domain: Kubernetes objects, database,
audit), never the reverse; `.importlinter` enforces it. Handlers are thin:
parse, authorise, call a provisioning function, render. Every failure is a
provisioning.errors.GatewayError rendered once by proxy.http.errors.
"""
