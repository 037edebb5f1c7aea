-- Users, sessions, workspaces, the audit log and rate-limit counters.
-- Invariants live here, not only in Python: one workspace per user, unique
-- namespaces, an append-only audit log. No column ever holds a Kubernetes token.

CREATE TABLE users (
    id            uuid PRIMARY KEY,
    email         text NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    password_hash text NOT NULL,
    status        text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended')),
    is_admin      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_unique ON users (lower(email));

-- A session row is the server-side half of a signed session token: revoking
-- it ends the session at once, whatever the token's own expiry says.
CREATE TABLE sessions (
    id         uuid PRIMARY KEY,
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE INDEX sessions_user ON sessions (user_id) WHERE revoked_at IS NULL;

CREATE TABLE workspaces (
    id            uuid PRIMARY KEY,
    user_id       uuid NOT NULL REFERENCES users (id),
    k8s_namespace text NOT NULL UNIQUE,
    k8s_sa_name   text NOT NULL,
    -- The tenant ServiceAccount's UID: part of the proxy's token cache key, so
    -- a replaced ServiceAccount can never be served a cached token of the old one.
    k8s_sa_uid    text,
    tier          text NOT NULL,
    status        text NOT NULL CHECK (status IN ('provisioning', 'provisioned', 'suspended')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX workspaces_one_per_user ON workspaces (user_id);

CREATE TABLE audit_logs (
    id           uuid PRIMARY KEY,
    user_id      uuid,
    workspace_id uuid,
    action       text NOT NULL,
    ip_address   inet,
    details      jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX audit_logs_created ON audit_logs (created_at DESC);
CREATE INDEX audit_logs_workspace ON audit_logs (workspace_id, created_at DESC);
CREATE INDEX audit_logs_user ON audit_logs (user_id, created_at DESC);

CREATE FUNCTION audit_logs_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_logs is append-only';
END $$;
CREATE TRIGGER audit_logs_no_update BEFORE UPDATE OR DELETE ON audit_logs
    FOR EACH ROW EXECUTE FUNCTION audit_logs_append_only();

-- Fixed-window counters shared by every replica.
CREATE TABLE rate_limits (
    key          text PRIMARY KEY,
    window_start timestamptz NOT NULL,
    hits         integer NOT NULL
);
