-- Parked work decided by people (migration 0008, rule 12):
--
-- * A record has four states: `open` (waits for a decision), `decided` (a
--   recovery is approved, no worker has claimed it), `recovering` (a
--   worker's run holds the job), `closed` (its job ended). A failed
--   recovery, or a reconcile, opens it again in a new round; each round
--   has at most one decision (a unique index), so racing reviewers make one.
-- * A job has at most one record that is not closed.
-- * Status checks and delivery tries are counted on the record.

CREATE TABLE parked_new (
    id              BLOB    PRIMARY KEY CHECK (length(id) = 16),
    job_id          BLOB    NOT NULL REFERENCES jobs (id),
    stage           TEXT    NOT NULL CHECK (stage IN ('submission_uncertain', 'polling_exhausted', 'delivery_exhausted', 'generation_failed')),
    state           TEXT    NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'decided', 'recovering', 'closed')),
    evidence        TEXT    NOT NULL,
    provider        TEXT,
    model           TEXT,
    provider_job_id TEXT,
    attempt_id      BLOB    REFERENCES attempts (id),
    created_at      TEXT    NOT NULL,
    round           INTEGER NOT NULL DEFAULT 1 CHECK (round > 0),
    polls           INTEGER NOT NULL DEFAULT 0 CHECK (polls >= 0),
    deliveries      INTEGER NOT NULL DEFAULT 0 CHECK (deliveries >= 0),
    updated_at      TEXT    NOT NULL
) STRICT;
INSERT INTO parked_new (id, job_id, stage, state, evidence, provider, model, provider_job_id, attempt_id,
                        created_at, updated_at)
SELECT id, job_id, stage, state, evidence, provider, model, provider_job_id, attempt_id, created_at, created_at
FROM parked;
DROP TABLE parked;
ALTER TABLE parked_new RENAME TO parked;
CREATE UNIQUE INDEX parked_active_per_job ON parked (job_id) WHERE state <> 'closed';
-- The queue: active records by age.
CREATE INDEX parked_queue ON parked (state, stage, created_at, id);

CREATE TABLE parked_decisions (
    id                 BLOB    PRIMARY KEY CHECK (length(id) = 16),
    parked_id          BLOB    NOT NULL REFERENCES parked (id),
    round              INTEGER NOT NULL,
    action             TEXT    NOT NULL
        CHECK (action IN ('reconcile', 'resume_poll', 'retry_delivery', 'accept_failure', 'new_attempt')),
    evidence           TEXT    NOT NULL CHECK (length(evidence) BETWEEN 1 AND 5000),
    -- The caller (from the session or token, never the body).
    reviewer           BLOB    NOT NULL REFERENCES users (id),
    decided_at         TEXT    NOT NULL,
    -- accept_failure's accounting decision.
    refund             INTEGER CHECK (refund IS NULL OR refund IN (0, 1)),
    release_hold       INTEGER CHECK (release_hold IS NULL OR release_hold IN (0, 1)),
    -- reconcile: the provider job id an investigation found.
    provider_job_id    TEXT    CHECK (provider_job_id IS NULL OR length(provider_job_id) BETWEEN 1 AND 200),
    -- new_attempt: the new job, and what the original may already have cost (millionths).
    new_job_id         BLOB    REFERENCES jobs (id),
    duplicate_cost_usd INTEGER,
    -- resume_poll and retry_delivery: the recovery a worker claims.
    recovery_state     TEXT    CHECK (recovery_state IS NULL OR recovery_state IN ('pending', 'claimed', 'succeeded', 'failed')),
    recovery_attempts  INTEGER NOT NULL DEFAULT 0,
    recovery_token     INTEGER,
    recovery_deadline  TEXT,
    recovery_ended_at  TEXT,
    UNIQUE (parked_id, round),
    CHECK ((recovery_state IS NULL) = (action NOT IN ('resume_poll', 'retry_delivery'))),
    CHECK ((action = 'accept_failure') = (refund IS NOT NULL AND release_hold IS NOT NULL)),
    CHECK ((action = 'reconcile') = (provider_job_id IS NOT NULL)),
    CHECK ((action = 'new_attempt') = (new_job_id IS NOT NULL))
) STRICT;
CREATE INDEX parked_decisions_reviewer ON parked_decisions (reviewer, decided_at);

-- A job made by a reviewer's new_attempt names the job it replaces.
ALTER TABLE jobs ADD COLUMN replaces BLOB REFERENCES jobs (id);

-- A claimed job whose record holds an approved recovery: the job's claim is
-- the recovery's claim (its lease and fencing token are the recovery's), so
-- the claim is atomic, leased and fenced by construction, and only the run
-- that holds the token can finish it.
CREATE TRIGGER jobs_recovery_claimed AFTER UPDATE OF fencing_token ON jobs
WHEN NEW.fencing_token <> OLD.fencing_token AND NEW.status = 'running'
BEGIN
    UPDATE parked_decisions
       SET recovery_state = 'claimed', recovery_attempts = recovery_attempts + 1,
           recovery_token = NEW.fencing_token
     WHERE recovery_state IN ('pending', 'claimed')
       AND (parked_id, round) IN (SELECT id, round FROM parked
                                   WHERE job_id = NEW.id AND state IN ('decided', 'recovering'));
    INSERT INTO job_events (job_id, kind, detail, created_at)
    SELECT NEW.id, 'recovery_claimed',
           json_object('action', d.action, 'worker', NEW.lease_owner, 'token', NEW.fencing_token),
           strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')
      FROM parked p JOIN parked_decisions d ON d.parked_id = p.id AND d.round = p.round
     WHERE p.job_id = NEW.id AND p.state IN ('decided', 'recovering');
    UPDATE parked SET state = 'recovering', updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')
     WHERE job_id = NEW.id AND state IN ('decided', 'recovering');
END;

-- A job that ends (succeeds, fails, is cancelled) closes its record: the
-- outcome is verified then, not when a worker picks the recovery up.
CREATE TRIGGER jobs_parked_closed AFTER UPDATE OF status ON jobs
WHEN NEW.status IN ('succeeded', 'failed', 'cancelled') AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled')
BEGIN
    UPDATE parked_decisions
       SET recovery_state = CASE WHEN NEW.status = 'succeeded' THEN 'succeeded' ELSE 'failed' END,
           recovery_ended_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')
     WHERE recovery_state IN ('pending', 'claimed')
       AND (parked_id, round) IN (SELECT id, round FROM parked WHERE job_id = NEW.id AND state <> 'closed');
    INSERT INTO job_events (job_id, kind, detail, created_at)
    SELECT NEW.id, 'review_closed', json_object('outcome', NEW.status), strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')
      FROM parked WHERE job_id = NEW.id AND state <> 'closed';
    UPDATE parked SET state = 'closed', updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')
     WHERE job_id = NEW.id AND state <> 'closed';
END;
