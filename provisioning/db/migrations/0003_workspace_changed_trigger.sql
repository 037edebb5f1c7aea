-- Every change to a workspace row tells every replica (cached lookups, cached
-- tokens, open streams) from the database itself: no statement that updates
-- a workspace can forget to, and the event goes out only if the change commits.
-- The channel is provisioning.db.repositories.EVENTS_CHANNEL.
CREATE FUNCTION tenant_gateway_workspace_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tenant_gateway_events', json_build_object(
        'kind', 'workspace_changed', 'id', NEW.id::text, 'status', NEW.status,
        'namespace', NEW.k8s_namespace)::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER workspace_changed AFTER UPDATE ON workspaces
    FOR EACH ROW EXECUTE FUNCTION tenant_gateway_workspace_changed();
