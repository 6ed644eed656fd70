-- Issue 33, 4: a job a reviewer replaced with a new attempt names its
-- replacement, so an API client that holds the old id can follow it (the
-- new job already names the one it replaces). Set by the same write that
-- ends the old job; backfilled from `replaces` for jobs replaced before.
ALTER TABLE jobs ADD COLUMN replaced_by BLOB REFERENCES jobs (id);
UPDATE jobs SET replaced_by = (SELECT n.id FROM jobs n WHERE n.replaces = jobs.id)
 WHERE id IN (SELECT replaces FROM jobs WHERE replaces IS NOT NULL);
