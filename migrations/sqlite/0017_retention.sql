-- Retention (migration 0017): media of finished work, closed evidence, the
-- timeline and webhook deliveries are purged past their age by a task on
-- the worker role. What was purged is marked, so a purge is idempotent and
-- a page can say what happened: a job's output (`media_purged_at`), an
-- upload (`purged_at`; uploading the same bytes again brings it back), a
-- closed record's evidence (`evidence_purged_at`). Rows that hold money
-- (jobs, attempts, the ledger, decisions) are never deleted.
ALTER TABLE jobs ADD COLUMN media_purged_at TEXT;
ALTER TABLE assets ADD COLUMN purged_at TEXT;
ALTER TABLE parked ADD COLUMN evidence_purged_at TEXT;
-- The purge's look-ups: finished jobs with an output still stored, old
-- uploads, closed records with evidence, finished deliveries.
CREATE INDEX jobs_media_kept ON jobs (completed_at)
    WHERE output_key IS NOT NULL AND media_purged_at IS NULL;
CREATE INDEX assets_kept ON assets (created_at) WHERE purged_at IS NULL;
CREATE INDEX parked_evidence_kept ON parked (updated_at)
    WHERE state = 'closed' AND evidence_purged_at IS NULL;
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (created_at)
    WHERE state IN ('delivered', 'dead');
