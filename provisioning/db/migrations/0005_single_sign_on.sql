-- Single sign-on.
-- A user signed in through an identity provider is (oidc_issuer, oidc_subject),
-- never an email: the same email at two providers is two users, and email is
-- unique only among password accounts, so an SSO login can never take one over.
ALTER TABLE users ALTER COLUMN password_hash DROP NOT NULL;
ALTER TABLE users ADD COLUMN oidc_issuer text, ADD COLUMN oidc_subject text, ADD COLUMN oidc_provider text;
ALTER TABLE users ADD CONSTRAINT users_sso_identity UNIQUE (oidc_issuer, oidc_subject);
ALTER TABLE users ADD CONSTRAINT users_sso_complete CHECK (
    (oidc_issuer IS NULL AND oidc_subject IS NULL AND oidc_provider IS NULL AND password_hash IS NOT NULL)
    OR (oidc_issuer IS NOT NULL AND oidc_subject IS NOT NULL AND oidc_provider IS NOT NULL AND password_hash IS NULL));
DROP INDEX users_email_unique;
CREATE UNIQUE INDEX users_email_unique ON users (lower(email)) WHERE oidc_issuer IS NULL;

-- Audit rows of SSO users carry their provider, whoever writes the row.
CREATE FUNCTION audit_logs_provider() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    found text;
BEGIN
    IF NEW.user_id IS NOT NULL THEN
        SELECT oidc_provider INTO found FROM users WHERE id = NEW.user_id;
        IF found IS NOT NULL THEN
            NEW.details := NEW.details || jsonb_build_object('provider', found);
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER audit_logs_provider BEFORE INSERT ON audit_logs
    FOR EACH ROW EXECUTE FUNCTION audit_logs_provider();

-- A browser sign-in under way: single use (consumed by DELETE ... RETURNING),
-- short-lived, bound to the browser that started it (browser_hash is the
-- SHA-256 of an HttpOnly cookie's value). Only hashes of the state are kept.
CREATE TABLE oidc_logins (
    state_hash    bytea PRIMARY KEY,
    provider      text NOT NULL,
    nonce         text NOT NULL,
    code_verifier text NOT NULL,
    redirect_uri  text NOT NULL,
    next_path     text NOT NULL,
    browser_hash  bytea NOT NULL,
    expires_at    timestamptz NOT NULL
);
CREATE INDEX oidc_logins_expiry ON oidc_logins (expires_at);
