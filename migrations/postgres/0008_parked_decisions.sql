-- Parked work decided by people (migration 0008, rule 12):
--
-- * A record has four states: `open` (waits for a decision), `decided` (a
--   recovery is approved, no worker has claimed it), `recovering` (a
--   worker's run holds the job), `closed` (its job ended). A failed
--   recovery, or a reconcile, opens it again in a new round; each round
--   has at most one decision (a unique index), so racing reviewers make one.
-- * A job has at most one record that is not closed.
-- * Status checks and delivery tries are counted on the record.

ALTER TABLE parked DROP CONSTRAINT parked_state_check;
ALTER TABLE parked ADD CONSTRAINT parked_state_check
    CHECK (state IN ('open', 'decided', 'recovering', 'closed'));
ALTER TABLE parked
    ADD COLUMN round      integer     NOT NULL DEFAULT 1 CHECK (round > 0),
    ADD COLUMN polls      integer     NOT NULL DEFAULT 0 CHECK (polls >= 0),
    ADD COLUMN deliveries integer     NOT NULL DEFAULT 0 CHECK (deliveries >= 0),
    ADD COLUMN updated_at timestamptz;
UPDATE parked SET updated_at = created_at;
ALTER TABLE parked ALTER COLUMN updated_at SET NOT NULL;

DROP INDEX parked_open_per_job;
CREATE UNIQUE INDEX parked_active_per_job ON parked (job_id) WHERE state <> 'closed';

CREATE TABLE parked_decisions (
    id                 uuid          PRIMARY KEY,
    parked_id          uuid          NOT NULL REFERENCES parked (id),
    round              integer       NOT NULL,
    action             text          NOT NULL
        CHECK (action IN ('reconcile', 'resume_poll', 'retry_delivery', 'accept_failure', 'new_attempt')),
    evidence           text          NOT NULL CHECK (length(evidence) BETWEEN 1 AND 5000),
    -- The caller (from the session or token, never the body).
    reviewer           uuid          NOT NULL REFERENCES users (id),
    decided_at         timestamptz   NOT NULL,
    -- accept_failure's accounting decision.
    refund             boolean,
    release_hold       boolean,
    -- reconcile: the provider job id an investigation found.
    provider_job_id    text          CHECK (provider_job_id IS NULL OR length(provider_job_id) BETWEEN 1 AND 200),
    -- new_attempt: the new job, and what the original may already have cost.
    new_job_id         uuid          REFERENCES jobs (id),
    duplicate_cost_usd numeric(12,6),
    -- resume_poll and retry_delivery: the recovery a worker claims.
    recovery_state     text          CHECK (recovery_state IS NULL OR recovery_state IN ('pending', 'claimed', 'succeeded', 'failed')),
    recovery_attempts  integer       NOT NULL DEFAULT 0,
    recovery_token     bigint,
    recovery_deadline  timestamptz,
    recovery_ended_at  timestamptz,
    UNIQUE (parked_id, round),
    CHECK ((recovery_state IS NULL) = (action NOT IN ('resume_poll', 'retry_delivery'))),
    CHECK ((action = 'accept_failure') = (refund IS NOT NULL AND release_hold IS NOT NULL)),
    CHECK ((action = 'reconcile') = (provider_job_id IS NOT NULL)),
    CHECK ((action = 'new_attempt') = (new_job_id IS NOT NULL))
);
CREATE INDEX parked_decisions_reviewer ON parked_decisions (reviewer, decided_at);

-- The queue: active records by age.
DROP INDEX parked_stage;
CREATE INDEX parked_queue ON parked (state, stage, created_at, id);

-- A job made by a reviewer's new_attempt names the job it replaces.
ALTER TABLE jobs ADD COLUMN replaces uuid REFERENCES jobs (id);

-- A claimed job whose record holds an approved recovery: the job's claim is
-- the recovery's claim (its lease and fencing token are the recovery's), so
-- the claim is atomic, leased and fenced by construction, and only the run
-- that holds the token can finish it.
CREATE FUNCTION jobs_recovery_claimed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    pid uuid;
    r integer;
    act text;
BEGIN
    UPDATE parked SET state = 'recovering', updated_at = now()
     WHERE job_id = NEW.id AND state IN ('decided', 'recovering')
     RETURNING id, round INTO pid, r;
    IF FOUND THEN
        UPDATE parked_decisions
           SET recovery_state = 'claimed', recovery_attempts = recovery_attempts + 1,
               recovery_token = NEW.fencing_token
         WHERE parked_id = pid AND round = r AND recovery_state IN ('pending', 'claimed')
         RETURNING action INTO act;
        INSERT INTO job_events (job_id, kind, detail, created_at)
        VALUES (NEW.id, 'recovery_claimed',
                jsonb_build_object('action', act, 'worker', NEW.lease_owner, 'token', NEW.fencing_token), now());
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_recovery_claimed AFTER UPDATE OF fencing_token ON jobs
    FOR EACH ROW WHEN (NEW.fencing_token <> OLD.fencing_token AND NEW.status = 'running')
    EXECUTE FUNCTION jobs_recovery_claimed();

-- A job that ends (succeeds, fails, is cancelled) closes its record: the
-- outcome is verified then, not when a worker picks the recovery up.
CREATE FUNCTION jobs_parked_closed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    pid uuid;
    r integer;
BEGIN
    UPDATE parked SET state = 'closed', updated_at = now()
     WHERE job_id = NEW.id AND state <> 'closed'
     RETURNING id, round INTO pid, r;
    IF FOUND THEN
        UPDATE parked_decisions
           SET recovery_state = CASE WHEN NEW.status = 'succeeded' THEN 'succeeded' ELSE 'failed' END,
               recovery_ended_at = now()
         WHERE parked_id = pid AND round = r AND recovery_state IN ('pending', 'claimed');
        INSERT INTO job_events (job_id, kind, detail, created_at)
        VALUES (NEW.id, 'review_closed', jsonb_build_object('outcome', NEW.status), now());
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_parked_closed AFTER UPDATE OF status ON jobs
    FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled') AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION jobs_parked_closed();
