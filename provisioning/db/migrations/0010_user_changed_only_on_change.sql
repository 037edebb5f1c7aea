-- user_changed (0004) fired on every UPDATE of a user row, and every
-- replica then cuts that user's open streams and drops their cached
-- sessions: each single sign-on, whose upsert rewrites the row (at least
-- the issue time of its token, 0009), cut all of the user's watches, logs
-- and exec sessions everywhere. It now fires only when a column the
-- replicas act on changed: those of the User they cache
-- (provisioning.db.repositories._user) — status (suspension), is_admin
-- (an admin may use other tenants' workspaces), email and provider.
DROP TRIGGER user_changed ON users;
CREATE TRIGGER user_changed AFTER UPDATE ON users
    FOR EACH ROW WHEN ((OLD.status, OLD.is_admin, OLD.email, OLD.oidc_provider)
                       IS DISTINCT FROM (NEW.status, NEW.is_admin, NEW.email, NEW.oidc_provider))
    EXECUTE FUNCTION tenant_gateway_row_event('user_changed');
