-- Device sign-in (the command line). Codes are stored hashed; the user code
-- is short and typed by a person, so it is unique among live codes and
-- approval attempts are rate-limited.
CREATE TABLE device_codes (
    device_hash  bytea PRIMARY KEY,
    user_code    text NOT NULL UNIQUE,
    expires_at   timestamptz NOT NULL,
    approved_by  uuid REFERENCES users (id) ON DELETE CASCADE,
    consumed_at  timestamptz
);
CREATE INDEX device_codes_expiry ON device_codes (expires_at);
