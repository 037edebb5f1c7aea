-- A cluster event's auditID is the client's to choose: the API server takes
-- it from the request's `Audit-ID` header when one is sent (a downloaded
-- kubeconfig talks to it directly), uncut and unchecked. Until now an
-- event whose ID was no UUID was skipped, and one reusing another
-- request's ID and stage was dropped as its duplicate: either way a
-- tenant's request could leave its person's timeline. So (provisioning.
-- cluster_events):
-- * the ID is kept as text, whatever it is (`audit_id_text`, cut to 128);
-- * an event is told from another by `event_digest`, SHA-256 of the whole
--   event in canonical JSON: the API server's retry of a batch resends
--   identical events, stored once; two requests sharing an ID are two rows;
-- * `received_at` (the request's requestReceivedTimestamp, the same in each
--   of its stages) tells a long request's own end from another request's
--   that shares its ID (provisioning.db.activity).
-- Only added, for the replicas of the previous release still writing
-- during the rollout: they go on filling `audit_id` (a UUID) and checking
-- UNIQUE (audit_id, stage); this release leaves `audit_id` NULL, so its rows
-- never meet that constraint (NULLs are distinct), and reads
-- COALESCE(audit_id_text, audit_id::text): rows stored before this
-- migration, or by an old replica during the rollout, have only `audit_id`
-- and no digest. A later release drops `audit_id` and its constraint.
ALTER TABLE cluster_events ALTER COLUMN audit_id DROP NOT NULL;
ALTER TABLE cluster_events ADD COLUMN audit_id_text text CHECK (length(audit_id_text) <= 128);
ALTER TABLE cluster_events ADD COLUMN event_digest bytea CHECK (length(event_digest) = 32);
ALTER TABLE cluster_events ADD COLUMN received_at timestamptz;
-- One index for both jobs: the same event is stored once (its digest covers
-- its ID, so the same event has the same pair), and the timeline finds
-- events by ID (a proxied write's own event, a long request's end:
-- provisioning.db.activity) through its first column, the expression it
-- reads, so rows of either kind are found. One index, not two: each is a
-- random insertion per row at 5,000 rows a second.
CREATE UNIQUE INDEX cluster_events_audit_key ON cluster_events ((COALESCE(audit_id_text, audit_id::text)), event_digest);
