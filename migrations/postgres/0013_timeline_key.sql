-- The timeline is only ever read one job at a time, in order
-- (`WHERE job_id = $1 ORDER BY id`), so its key is (job_id, id): one index
-- where there were two (the id's own and (job_id, id)), and a timeline row
-- costs one index entry instead of two. A job's run writes about nine.
-- The id stays unique on its own: it comes from the sequence.
ALTER TABLE job_events DROP CONSTRAINT job_events_pkey;
DROP INDEX job_events_job;
ALTER TABLE job_events ADD PRIMARY KEY (job_id, id);
