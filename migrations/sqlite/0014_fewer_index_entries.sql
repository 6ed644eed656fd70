-- Migration 0014 (see the PostgreSQL one): two indexes only repeated
-- another's leading column, and the queue gets its own index in claim
-- order. SQLite has no fill factor: it rewrites a row in its page when the
-- row fits.
DROP INDEX jobs_status;
DROP INDEX attempts_job;
CREATE INDEX jobs_queued ON jobs (created_at) WHERE status = 'queued';
