-- Open proxied streams, so the per-workspace cap holds across replicas.
-- Each replica keeps its own rows equal to the streams it holds and says it
-- is alive every few seconds; the rows of a replica that stopped saying so
-- (a crash) no longer count and are removed by the others. Worth nothing
-- after a database crash (every replica rewrites its rows at its next
-- beat), so unlogged, like the rate-limit counters.
CREATE UNLOGGED TABLE gateway_replicas (
    replica_id  uuid PRIMARY KEY,
    seen_at     timestamptz NOT NULL
);
CREATE UNLOGGED TABLE stream_slots (
    slot_id       uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL,
    replica_id    uuid NOT NULL
);
CREATE INDEX stream_slots_workspace ON stream_slots (workspace_id);
CREATE INDEX stream_slots_replica ON stream_slots (replica_id);
