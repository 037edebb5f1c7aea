"""Helpers the test modules share, so no test module imports another:
driving the gateway as a client would (gatewayclient), kubectl and the
Kubernetes client through it (kubeclients), pods and their streams (pods),
watches (watches), onboarded tenants seen by the cluster's admin (tenants),
gateway replicas as processes (replicas), a browser signing in at a provider
(signin_browser), the console in Chromium (browser),
per-test databases (databases), the gateway's environment (environment) and
the shipped permissions as an API server answers them (permissions).

FAKEs of the app's seams are in tests/fakes."""
