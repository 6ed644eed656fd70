-- Execution: claims with leases and fencing tokens (rule 5), each job's
-- completed steps (rule 6), provider attempts written before the call
-- (rules 7 and 10), and the daily spending breaker (rule 11).

ALTER TABLE jobs ADD COLUMN lease_owner TEXT;
ALTER TABLE jobs ADD COLUMN lease_expires_at TEXT;
-- Bumped by every claim; every write of a run names it.
ALTER TABLE jobs ADD COLUMN fencing_token INTEGER NOT NULL DEFAULT 0;
-- Where the job's output lives once stored.
ALTER TABLE jobs ADD COLUMN output_key TEXT;
ALTER TABLE jobs ADD COLUMN review TEXT;
ALTER TABLE jobs ADD COLUMN output_content_type TEXT;
CREATE INDEX jobs_claimable ON jobs (status, lease_expires_at, created_at);

CREATE TABLE job_steps (
    job_id        BLOB    NOT NULL REFERENCES jobs (id),
    step          TEXT    NOT NULL,
    output        TEXT    NOT NULL,
    fencing_token INTEGER NOT NULL,
    completed_at  TEXT    NOT NULL,
    PRIMARY KEY (job_id, step)
) STRICT;

CREATE TABLE attempts (
    id              BLOB    PRIMARY KEY CHECK (length(id) = 16),
    job_id          BLOB    NOT NULL REFERENCES jobs (id),
    provider        TEXT    NOT NULL,
    model           TEXT    NOT NULL,
    attempt_no      INTEGER NOT NULL CHECK (attempt_no > 0),
    state           TEXT    NOT NULL CHECK (state IN ('submitting', 'submitted', 'succeeded', 'failed')),
    idempotency_key TEXT    NOT NULL,
    provider_job_id TEXT,
    error_class     TEXT,
    error           TEXT,
    duration_ms     INTEGER,
    usage           TEXT,
    -- Exact decimal as text; NULL when nobody could price it (never 0).
    cost_usd        TEXT,
    cost_source     TEXT    CHECK (cost_source IS NULL OR cost_source IN ('quoted', 'derived', 'local')),
    started_at      TEXT    NOT NULL,
    finished_at     TEXT,
    UNIQUE (job_id, provider, attempt_no),
    CHECK ((cost_usd IS NULL) = (cost_source IS NULL))
) STRICT;
CREATE INDEX attempts_job ON attempts (job_id, started_at);

CREATE TABLE budget_days (
    day          TEXT    PRIMARY KEY,
    cap_usd      TEXT    NOT NULL,
    used_usd     TEXT    NOT NULL DEFAULT '0.000000',
    reserved_usd TEXT    NOT NULL DEFAULT '0.000000',
    halted       INTEGER NOT NULL DEFAULT 0 CHECK (halted IN (0, 1))
) STRICT;

CREATE TABLE reservations (
    job_id      BLOB NOT NULL REFERENCES jobs (id),
    day         TEXT NOT NULL REFERENCES budget_days (day),
    amount_usd  TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('held', 'settled', 'released')),
    settled_usd TEXT,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (job_id)
) STRICT;
