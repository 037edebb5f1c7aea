-- Spare binding Secrets (provisioning.spares): a workspace keeps a few
-- data-less Secrets of the gateway's type made ahead, so an issuance binds
-- its token to one instead of making one (a Secret create and its quota
-- update) while the person waits. A spare is a row like an issuance's,
-- begun and not issued, with no owner, kind or account yet, and, once its
-- Secret is made, that Secret's uid. An issuance claims one by filling them
-- in (one row, one claimer: FOR UPDATE SKIP LOCKED, and the owner still
-- empty), and from then on it is that issuance's and nothing else's. Spares
-- count among the workspace's live credentials (the tier's bound and its
-- quota room), and one never claimed is swept as an issuance cut short is.
ALTER TABLE credentials ALTER COLUMN user_id DROP NOT NULL;
ALTER TABLE credentials ALTER COLUMN kind DROP NOT NULL;
ALTER TABLE credentials ALTER COLUMN service_account DROP NOT NULL;
ALTER TABLE credentials ADD COLUMN secret_uid text;
ALTER TABLE credentials ADD CONSTRAINT credentials_spare_or_owned CHECK (
    (user_id IS NULL AND kind IS NULL AND service_account IS NULL AND NOT issued)
    OR (user_id IS NOT NULL AND kind IS NOT NULL AND service_account IS NOT NULL));
CREATE INDEX credentials_spares ON credentials (workspace_id, issued_at)
    WHERE user_id IS NULL AND secret_deleted_at IS NULL;
