-- Team workspaces (provisioning.members): a workspace has members, each with
-- a role and a ServiceAccount of their own in the workspace namespace, so the
-- API server enforces the role and its audit log names the person.
--
-- Invariants kept here, whatever statement changes the rows:
-- - every workspace has its owner as an `admin` member whose account is the
--   workspace's own `sa-tenant-admin` (the insert trigger), and that row's
--   ServiceAccount UID is the workspace's (the update trigger): suspension
--   and resume replace it in one place;
-- - a change to a membership tells every replica (`member_changed`, on
--   commit), which drops the cached membership and cuts that member's
--   streams in that workspace.
CREATE TABLE workspace_members (
    workspace_id        uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    user_id             uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role                text NOT NULL CHECK (role IN ('admin', 'edit', 'view')),
    -- How they became a member: added or invited by a workspace admin
    -- ('direct'), or through a group binding, named by group_provider and
    -- group_name (re-evaluated at each of their sign-ins).
    via                 text NOT NULL DEFAULT 'direct' CHECK (via IN ('direct', 'group')),
    group_provider      text,
    group_name          text,
    service_account     text NOT NULL,
    -- NULL while the member's ServiceAccount and RoleBinding are not made
    -- (made at their first credential, provisioning.members.seat) or were
    -- revoked (a suspended user).
    service_account_uid text,
    -- When the member's objects were last deleted: new ones are bound only
    -- once the API server's token cache cannot hold a token of the old ones.
    revoked_at          timestamptz,
    added_by            uuid REFERENCES users (id) ON DELETE SET NULL,
    added_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, user_id),
    CHECK ((via = 'group') = (group_provider IS NOT NULL AND group_name IS NOT NULL))
);
CREATE INDEX workspace_members_user ON workspace_members (user_id);
CREATE UNIQUE INDEX workspace_members_account ON workspace_members (workspace_id, service_account);

-- Invitations by email, accepted when an account whose email its identity
-- provider verified signs in (only then: a password account's email is its
-- owner's word). `provider` NULL: any configured provider.
CREATE TABLE workspace_invitations (
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    email        text NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    provider     text,
    role         text NOT NULL CHECK (role IN ('admin', 'edit', 'view')),
    added_by     uuid REFERENCES users (id) ON DELETE SET NULL,
    added_at     timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX workspace_invitations_email ON workspace_invitations (workspace_id, lower(email));
CREATE INDEX workspace_invitations_lookup ON workspace_invitations (lower(email));

-- Everyone whose ID token from `provider` lists `group_name` is a member with `role`.
CREATE TABLE workspace_groups (
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    provider     text NOT NULL,
    group_name   text NOT NULL CHECK (length(group_name) BETWEEN 1 AND 255),
    role         text NOT NULL CHECK (role IN ('admin', 'edit', 'view')),
    added_by     uuid REFERENCES users (id) ON DELETE SET NULL,
    added_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, provider, group_name)
);
CREATE INDEX workspace_groups_lookup ON workspace_groups (provider, group_name);

-- A workspace's owner is its first admin member.
CREATE FUNCTION tenant_gateway_owner_member() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO workspace_members (workspace_id, user_id, role, service_account, service_account_uid,
                                   added_by, added_at)
    VALUES (NEW.id, NEW.user_id, 'admin', NEW.k8s_sa_name, NEW.k8s_sa_uid, NEW.user_id, NEW.created_at)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER workspace_owner_member AFTER INSERT ON workspaces
    FOR EACH ROW EXECUTE FUNCTION tenant_gateway_owner_member();

CREATE FUNCTION tenant_gateway_owner_account() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE workspace_members SET service_account_uid = NEW.k8s_sa_uid
    WHERE workspace_id = NEW.id AND user_id = NEW.user_id
      AND service_account_uid IS DISTINCT FROM NEW.k8s_sa_uid;
    RETURN NULL;
END $$;
CREATE TRIGGER workspace_owner_account AFTER UPDATE OF k8s_sa_uid ON workspaces
    FOR EACH ROW WHEN (OLD.k8s_sa_uid IS DISTINCT FROM NEW.k8s_sa_uid)
    EXECUTE FUNCTION tenant_gateway_owner_account();

CREATE FUNCTION tenant_gateway_member_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed workspace_members%ROWTYPE;
BEGIN
    IF TG_OP = 'DELETE' THEN changed := OLD; ELSE changed := NEW; END IF;
    PERFORM pg_notify('tenant_gateway_events', json_build_object(
        'kind', 'member_changed', 'workspace_id', changed.workspace_id::text,
        'user_id', changed.user_id::text)::text);
    RETURN NULL;
END $$;
CREATE TRIGGER member_added_or_removed AFTER INSERT OR DELETE ON workspace_members
    FOR EACH ROW EXECUTE FUNCTION tenant_gateway_member_changed();
-- Only a change replicas act on: the role, or the account's UID.
CREATE TRIGGER member_changed AFTER UPDATE ON workspace_members
    FOR EACH ROW WHEN ((OLD.role, OLD.service_account_uid) IS DISTINCT FROM (NEW.role, NEW.service_account_uid))
    EXECUTE FUNCTION tenant_gateway_member_changed();

-- Existing workspaces: their owner becomes their admin member.
INSERT INTO workspace_members (workspace_id, user_id, role, service_account, service_account_uid, added_by, added_at)
SELECT id, user_id, 'admin', k8s_sa_name, k8s_sa_uid, user_id, created_at FROM workspaces
ON CONFLICT DO NOTHING;
