-- Users and sessions tell the replicas the same way workspaces do (0003):
-- from the database, on commit, whatever statement made the change. A user
-- update drops that user's cached sessions; a revoked session drops itself.
-- The channel is provisioning.db.repositories.EVENTS_CHANNEL; the trigger's
-- argument is the event's kind.
CREATE FUNCTION tenant_gateway_row_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tenant_gateway_events', json_build_object('kind', TG_ARGV[0], 'id', NEW.id::text)::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER user_changed AFTER UPDATE ON users
    FOR EACH ROW EXECUTE FUNCTION tenant_gateway_row_event('user_changed');

CREATE TRIGGER session_revoked AFTER UPDATE OF revoked_at ON sessions
    FOR EACH ROW WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
    EXECUTE FUNCTION tenant_gateway_row_event('session_revoked');
