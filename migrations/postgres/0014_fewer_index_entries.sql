-- A job's run rewrites its job row three times and its attempt row twice,
-- and every rewrite that changes an indexed column adds an entry to each of
-- the table's indexes. Two indexes only repeated another's leading column:
-- jobs (status) is how jobs_claimable (status, lease_expires_at,
-- created_at) starts, and attempts (job_id, started_at) starts as the
-- unique (job_id, provider, attempt_no) does, which finds a job's attempts
-- as well (a job has a handful; ordering them costs nothing).
DROP INDEX jobs_status;
DROP INDEX attempts_job;
-- Room in each page for a row's next version: an update that changes no
-- indexed column (a job's progress, an attempt's prediction id) then stays
-- in its page and adds no index entry at all (a heap-only update). It
-- applies to pages written from now on.
ALTER TABLE jobs SET (fillfactor = 80);
ALTER TABLE attempts SET (fillfactor = 80);
-- The queue in claim order: a claim reads the oldest queued jobs straight
-- from it instead of every active job (the runs in flight come first in
-- jobs_active's order) and a sort. A job leaves it when it is claimed.
CREATE INDEX jobs_queued ON jobs (created_at) WHERE status = 'queued';
