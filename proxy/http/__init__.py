"""Request and answer plumbing that every route shares, and that knows no
feature: the contract's error shape, the headers every answer carries,
client addresses, bounded bodies, structured logs, metrics, expiring caches
and the drain's per-request bookkeeping."""
