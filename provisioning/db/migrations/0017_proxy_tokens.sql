-- The proxy's own tokens (proxy.passthrough.token_minting), one row per
-- token the token cache mints: its `jti` (never the token), the person it
-- was minted for, their workspace and cluster, the account and expiry. The
-- API server writes that jti into its audit log like a kubeconfig's, so a
-- cluster event made through the gateway's proxy (web session, console,
-- kubectl pointed at the gateway) is joined to the person who made it, at
-- write time, as an issued credential's is (migration 0014). The row commits
-- before the token is first sent: no event can arrive ahead of it.
CREATE TABLE proxy_tokens (
    jti             text NOT NULL CHECK (length(jti) <= 128),
    cluster         text NOT NULL,
    user_id         uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    workspace_id    uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    service_account text NOT NULL,
    issued_at       timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (jti, cluster)
);
-- Swept with the cluster events (GATEWAY_AUDIT_RETENTION_DAYS after expiry).
CREATE INDEX proxy_tokens_expires ON proxy_tokens (expires_at);

-- How an attributed event reached the API server: the kind of the issued
-- credential (`kubeconfig`, `token`), or `proxy` (a proxy token above).
-- NULL for an unattributed event, and for events stored before this
-- migration (the timeline reads their credential's kind instead).
ALTER TABLE cluster_events ADD COLUMN via text CHECK (via IN ('kubeconfig', 'token', 'proxy'));
