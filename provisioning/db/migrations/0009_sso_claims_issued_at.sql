-- The issue time (`iat`) of the ID token whose claims a single-sign-on
-- user's row last took (provisioning.db.repositories.sso_user): a token
-- older than that cannot put back the email or admin rights a newer one
-- replaced (a demoted admin holding an old, unexpired ID token), and one
-- exactly as old may only take admin rights away. NULL for password
-- accounts, and for SSO rows made before this (any token then applies).
ALTER TABLE users ADD COLUMN oidc_claims_issued_at timestamptz;
