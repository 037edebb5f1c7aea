-- The API server's own audit log (its webhook backend, proxy.server.audit_listener),
-- joined to people at write time: an event whose user extra
-- `authentication.kubernetes.io/credential-id` is `JTI=<jti>` of a credential
-- the gateway issued (migration 0013) is stored against that credential, its
-- person and workspace. One the gateway did not issue (a token a tenant minted
-- itself) in a tenant namespace is kept with no person (user_id NULL), its
-- workspace named by the namespace; anything else is not stored. Metadata
-- only: no request or response body ever reaches this table.
CREATE TABLE cluster_events (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    audit_id      uuid NOT NULL,
    stage         text NOT NULL CHECK (length(stage) <= 32),
    time          timestamptz NOT NULL,
    verb          text NOT NULL CHECK (length(verb) <= 32),
    resource      text CHECK (length(resource) <= 253),
    subresource   text CHECK (length(subresource) <= 253),
    namespace     text CHECK (length(namespace) <= 253),
    name          text CHECK (length(name) <= 253),
    code          integer,
    user_agent    text CHECK (length(user_agent) <= 512),
    source_ip     inet,
    username      text CHECK (length(username) <= 512),
    jti           text CHECK (length(jti) <= 128),
    credential_id uuid,
    user_id       uuid,
    workspace_id  uuid,
    -- The API server sends batches concurrently and retries a failed one
    -- whole: the same (audit id, stage) may arrive twice, and is kept once.
    UNIQUE (audit_id, stage)
);
-- The activity timeline (newest first) per person, per workspace, and the
-- retention sweep (oldest first).
CREATE INDEX cluster_events_user ON cluster_events (user_id, time DESC);
CREATE INDEX cluster_events_workspace ON cluster_events (workspace_id, time DESC);
CREATE INDEX cluster_events_time ON cluster_events (time);
