-- Migration 0013 gives PostgreSQL's timeline one index instead of two (its
-- key becomes (job_id, id)). SQLite's id is the rowid, the table itself,
-- so its one index on (job_id, id) already is that: nothing changes here.
SELECT 1;
