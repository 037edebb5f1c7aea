-- Device sign-in that cannot be phished (proxy.routes.device): what asked
-- for a code, shown to the person who types it before they approve (the
-- client's self-declared name, its address as the gateway saw it, when it
-- asked), and the user code kept only as its SHA-256, so the look-up of a
-- typed code compares digests: how long it takes tells nothing about how
-- many of the typed letters were right. Codes live ten minutes; the ones
-- pending now keep working under their digest.
ALTER TABLE device_codes
    ADD COLUMN client_name    text,
    ADD COLUMN client_address inet,
    ADD COLUMN started_at     timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN user_code_hash bytea;
UPDATE device_codes SET user_code_hash = sha256(convert_to(user_code, 'UTF8'));
ALTER TABLE device_codes ALTER COLUMN user_code_hash SET NOT NULL;
ALTER TABLE device_codes DROP COLUMN user_code;
ALTER TABLE device_codes ADD CONSTRAINT device_codes_user_code_hash_key UNIQUE (user_code_hash);
