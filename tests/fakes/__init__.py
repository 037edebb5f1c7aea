"""FAKEs for the app's test seams (proxy.app.create_app: `kube`, `upstream`,
`clock`), for what a real component cannot be made to do on cue. Each one
says FAKE in its docstring, and so does every test that uses one.

- apiserver: FAKE API servers (aiohttp servers answering as a test says)
  and the fixtures that start them with a pass-through upstream to them.
- kube: FAKE gateway clients (the `kube` seam) that issue tenant tokens.
- clock: a monotonic clock the test moves (the `clock` seam).
"""
