-- Every issued token (a kubeconfig's, the token route's, the exec plugin's)
-- is bound to a data-less Secret of the gateway's own type in the workspace
-- namespace (provisioning.credentials): deleting that Secret makes the API
-- server refuse the token. This is the issuance's record: who, for which
-- workspace and account, its `jti` (which the API server writes into its
-- own audit log), when it expires, whether it was revoked. Never the token.
CREATE TABLE credentials (
    id                uuid PRIMARY KEY,
    user_id           uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    workspace_id      uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    kind              text NOT NULL CHECK (kind IN ('kubeconfig', 'token')),
    namespace         text NOT NULL,
    service_account   text NOT NULL,
    secret_name       text NOT NULL,
    jti               text,
    issued_at         timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz NOT NULL,
    revoked_at        timestamptz,
    -- When its binding Secret went: revoked, or swept once expired.
    secret_deleted_at timestamptz,
    ip_address        inet,
    user_agent        text CHECK (length(user_agent) <= 512),
    last_used_at      timestamptz,
    -- False from before the binding Secret is made until the token's audit
    -- row commits (in the same statement as this turns true): an issuance
    -- cut short in between is never listed, and its Secret is swept.
    issued            boolean NOT NULL DEFAULT false
);
CREATE INDEX credentials_user ON credentials (user_id, issued_at DESC);
CREATE INDEX credentials_workspace ON credentials (workspace_id, issued_at DESC);
CREATE UNIQUE INDEX credentials_jti ON credentials (jti) WHERE jti IS NOT NULL;
-- The sweep of expired binding Secrets reads only what is left to delete.
CREATE INDEX credentials_to_sweep ON credentials (expires_at) WHERE secret_deleted_at IS NULL;
CREATE INDEX credentials_unfinished ON credentials (issued_at) WHERE NOT issued AND secret_deleted_at IS NULL;
