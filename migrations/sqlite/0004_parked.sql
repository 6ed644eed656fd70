-- Parked work (rules 7 and 12): a job Tollgate cannot finish without a
-- person's decision gets a record of its stage and the evidence; the
-- reviewer queue builds its decisions on this table. One open record per job.

CREATE TABLE parked (
    id              BLOB PRIMARY KEY CHECK (length(id) = 16),
    job_id          BLOB NOT NULL REFERENCES jobs (id),
    stage           TEXT NOT NULL CHECK (stage IN ('submission_uncertain', 'polling_exhausted', 'delivery_exhausted', 'generation_failed')),
    state           TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'closed')),
    evidence        TEXT NOT NULL,
    provider        TEXT,
    model           TEXT,
    provider_job_id TEXT,
    attempt_id      BLOB REFERENCES attempts (id),
    -- The budget hold kept while parked (exact decimal as text), if any.
    hold_usd        TEXT,
    created_at      TEXT NOT NULL
) STRICT;
CREATE UNIQUE INDEX parked_open_per_job ON parked (job_id) WHERE state = 'open';
CREATE INDEX parked_stage ON parked (state, stage, created_at);
