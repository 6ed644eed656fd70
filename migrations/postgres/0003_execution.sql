-- Execution: claims with leases and fencing tokens (rule 5), each job's
-- completed steps (rule 6), provider attempts written before the call
-- (rules 7 and 10), and the daily spending breaker (rule 11).

ALTER TABLE jobs ADD COLUMN lease_owner text;
ALTER TABLE jobs ADD COLUMN lease_expires_at timestamptz;
-- Bumped by every claim; every write of a run names it.
ALTER TABLE jobs ADD COLUMN fencing_token bigint NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN output_key text;
ALTER TABLE jobs ADD COLUMN review jsonb;
ALTER TABLE jobs ADD COLUMN output_content_type text;
CREATE INDEX jobs_claimable ON jobs (status, lease_expires_at, created_at);

CREATE TABLE job_steps (
    job_id        uuid        NOT NULL REFERENCES jobs (id),
    step          text        NOT NULL,
    output        jsonb       NOT NULL,
    fencing_token bigint      NOT NULL,
    completed_at  timestamptz NOT NULL,
    PRIMARY KEY (job_id, step)
);

CREATE TABLE attempts (
    id              uuid          PRIMARY KEY,
    job_id          uuid          NOT NULL REFERENCES jobs (id),
    provider        text          NOT NULL,
    model           text          NOT NULL,
    attempt_no      integer       NOT NULL CHECK (attempt_no > 0),
    state           text          NOT NULL CHECK (state IN ('submitting', 'submitted', 'succeeded', 'failed')),
    idempotency_key text          NOT NULL,
    provider_job_id text,
    error_class     text,
    error           text,
    duration_ms     bigint,
    usage           jsonb,
    -- NULL when nobody could price it (never 0).
    cost_usd        numeric(12,6),
    cost_source     text          CHECK (cost_source IS NULL OR cost_source IN ('quoted', 'derived', 'local')),
    started_at      timestamptz   NOT NULL,
    finished_at     timestamptz,
    UNIQUE (job_id, provider, attempt_no),
    CHECK ((cost_usd IS NULL) = (cost_source IS NULL))
);
CREATE INDEX attempts_job ON attempts (job_id, started_at);

CREATE TABLE budget_days (
    day          date          PRIMARY KEY,
    cap_usd      numeric(12,6) NOT NULL,
    used_usd     numeric(12,6) NOT NULL DEFAULT 0,
    reserved_usd numeric(12,6) NOT NULL DEFAULT 0,
    halted       boolean       NOT NULL DEFAULT false
);

CREATE TABLE reservations (
    job_id      uuid          PRIMARY KEY REFERENCES jobs (id),
    day         date          NOT NULL REFERENCES budget_days (day),
    amount_usd  numeric(12,6) NOT NULL,
    state       text          NOT NULL CHECK (state IN ('held', 'settled', 'released')),
    settled_usd numeric(12,6),
    created_at  timestamptz   NOT NULL
);
