-- Several clusters (provisioning.clusters, provisioning.placement): each
-- workspace is on one cluster, named as configured; workspaces made before
-- there was a choice are on `default`, the name a single-cluster gateway's
-- one cluster has.
ALTER TABLE workspaces ADD COLUMN cluster text NOT NULL DEFAULT 'default'
    CHECK (cluster ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$');
-- A workspace of a dedicated tier holds its cluster alone. Kept here, not
-- only in Python: two onboardings racing for the last free dedicated
-- cluster cannot both take it (the second insert conflicts on this index).
ALTER TABLE workspaces ADD COLUMN dedicated boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX workspaces_one_per_dedicated_cluster ON workspaces (cluster) WHERE dedicated;
-- Placement counts workspaces per cluster.
CREATE INDEX workspaces_cluster ON workspaces (cluster);

-- A credential was issued by its workspace's cluster: a jti is unique per
-- token, but audit receivers are per cluster, so it is joined per cluster.
ALTER TABLE credentials ADD COLUMN cluster text NOT NULL DEFAULT 'default';
UPDATE credentials c SET cluster = w.cluster FROM workspaces w WHERE w.id = c.workspace_id;
DROP INDEX credentials_jti;
-- jti first: the audit join looks events up by jti (then checks the cluster).
CREATE UNIQUE INDEX credentials_jti ON credentials (jti, cluster) WHERE jti IS NOT NULL;
