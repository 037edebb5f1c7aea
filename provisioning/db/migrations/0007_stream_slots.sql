-- Open proxied streams, so the per-workspace cap holds across replicas
-- (proxy.passthrough.stream_slots). Logged: after a database crash the rows
-- are still there, and the cap with them.
CREATE TABLE gateway_replicas (
    replica_id  uuid PRIMARY KEY,
    seen_at     timestamptz NOT NULL
);
CREATE TABLE stream_slots (
    slot_id       uuid PRIMARY KEY,
    workspace_id  uuid NOT NULL,
    replica_id    uuid NOT NULL
);
CREATE INDEX stream_slots_workspace ON stream_slots (workspace_id);
CREATE INDEX stream_slots_replica ON stream_slots (replica_id);
