-- Parked work (rules 7 and 12): a job Tollgate cannot finish without a
-- person's decision gets a record of its stage and the evidence; the
-- reviewer queue builds its decisions on this table. One open record per job.

CREATE TABLE parked (
    id              uuid          PRIMARY KEY,
    job_id          uuid          NOT NULL REFERENCES jobs (id),
    stage           text          NOT NULL CHECK (stage IN ('submission_uncertain', 'polling_exhausted', 'delivery_exhausted', 'generation_failed')),
    state           text          NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'closed')),
    evidence        jsonb         NOT NULL,
    provider        text,
    model           text,
    provider_job_id text,
    attempt_id      uuid REFERENCES attempts (id),
    hold_usd        numeric(12,6),
    created_at      timestamptz   NOT NULL
);
CREATE UNIQUE INDEX parked_open_per_job ON parked (job_id) WHERE state = 'open';
CREATE INDEX parked_stage ON parked (state, stage, created_at);
