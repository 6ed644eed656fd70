-- The store written once for both backends (migration 0006):
--
-- * Money stays NUMERIC(12,6) here (SQLite moves to whole millionths), so
--   the breaker's arithmetic and every spend sum run in SQL, exactly.
-- * Every paid attempt holds its own model's estimate against its day
--   (rule 11): the hold, its day and what settled it live on the attempt,
--   and the day's `reserved_usd` and `used_usd` are kept by triggers, so they
--   always equal the sums over the attempts. `reservations` goes away.
-- * A job's progress (its typed step outputs) is one document on the job,
--   written with the run's durable writes; `job_steps` goes away.
-- * The timeline's routine events (created, claimed, attempt, submitted,
--   attempt ended, settled, terminal, released) are written by triggers,
--   and a terminal job settles every hold it still has (rule 11).

ALTER TABLE jobs ADD COLUMN progress jsonb;
DROP INDEX jobs_claimable;
-- What a claim looks through: only jobs that are queued or running.
CREATE INDEX jobs_active ON jobs (created_at) WHERE status IN ('queued', 'running');
CREATE INDEX jobs_lease_owner ON jobs (lease_owner) WHERE status = 'running';

ALTER TABLE budget_days
    ADD COLUMN halted_reason text CHECK (halted_reason IS NULL OR length(halted_reason) <= 500),
    ADD COLUMN halted_by     uuid REFERENCES users (id),
    ADD COLUMN halted_at     timestamptz;

ALTER TABLE attempts
    -- What the call was for: the paid edit or video, or a checker's look.
    ADD COLUMN purpose     text NOT NULL DEFAULT 'generate'
        CHECK (purpose IN ('generate', 'readiness', 'review', 'compare')),
    -- Where it was sent: recovery goes to the same place or parks.
    ADD COLUMN endpoint    text,
    -- Rule 11: the estimate held against `budget_day` before the call, and
    -- what settled it (the cost, or the hold when the cost is unknown).
    ADD COLUMN hold_usd    numeric(12,6) CHECK (hold_usd IS NULL OR hold_usd >= 0),
    ADD COLUMN budget_day  date REFERENCES budget_days (day),
    ADD COLUMN settled_usd numeric(12,6) CHECK (settled_usd IS NULL OR settled_usd >= 0),
    ADD CHECK ((hold_usd IS NULL) = (budget_day IS NULL)),
    ADD CHECK (settled_usd IS NULL OR hold_usd IS NOT NULL),
    ADD CHECK (cost_usd IS NULL OR cost_usd >= 0);

-- A job's old single reservation goes onto its latest attempt; a hold kept
-- without any attempt is released.
UPDATE attempts a
   SET hold_usd = r.amount_usd,
       budget_day = r.day,
       settled_usd = CASE WHEN r.state = 'held' THEN NULL ELSE COALESCE(r.settled_usd, r.amount_usd) END
  FROM reservations r
 WHERE r.job_id = a.job_id
   AND a.attempt_no = (SELECT max(x.attempt_no) FROM attempts x WHERE x.job_id = a.job_id);
UPDATE budget_days b
   SET reserved_usd = greatest(0, b.reserved_usd - COALESCE((
         SELECT sum(r.amount_usd) FROM reservations r
          WHERE r.day = b.day AND r.state = 'held'
            AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = r.job_id)), 0));
ALTER TABLE budget_days ADD CHECK (reserved_usd >= 0);

DROP TABLE reservations;
DROP TABLE job_steps;
DROP FUNCTION job_steps_event();
ALTER TABLE parked DROP COLUMN hold_usd;

CREATE INDEX attempts_held ON attempts (job_id) WHERE settled_usd IS NULL AND hold_usd IS NOT NULL;

-- ---- the timeline and the day's counters, kept by the database ----

CREATE FUNCTION jobs_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.id, 'created',
            jsonb_build_object('credits', NEW.credits, 'estimated_usd', NEW.estimated_usd::text),
            NEW.created_at);
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_created AFTER INSERT ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_created();

CREATE FUNCTION jobs_claimed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.id, 'claimed', jsonb_build_object('worker', NEW.lease_owner, 'token', NEW.fencing_token), now());
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_claimed AFTER UPDATE OF fencing_token ON jobs
    FOR EACH ROW WHEN (NEW.fencing_token <> OLD.fencing_token) EXECUTE FUNCTION jobs_claimed();

-- Rule 11: a job that ends settles every hold it still has, from what its
-- attempt recorded (the cost, or the hold when the cost is unknown).
CREATE FUNCTION jobs_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE attempts SET settled_usd = COALESCE(cost_usd, hold_usd)
     WHERE job_id = NEW.id AND hold_usd IS NOT NULL AND settled_usd IS NULL;
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.id, NEW.status,
            CASE WHEN NEW.error IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('code', NEW.error -> 'code') END,
            NEW.completed_at);
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_ended AFTER UPDATE OF status ON jobs
    FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled') AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION jobs_ended();

CREATE FUNCTION jobs_released() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.id, 'released', jsonb_build_object('token', NEW.fencing_token), now());
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_released AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status = 'queued') EXECUTE FUNCTION jobs_released();

-- Rule 11: a paid attempt's hold counts against its day from the moment it
-- is written (before the call).
CREATE FUNCTION attempts_begun() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.hold_usd IS NOT NULL THEN
        UPDATE budget_days SET reserved_usd = reserved_usd + NEW.hold_usd WHERE day = NEW.budget_day;
    END IF;
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.job_id, 'attempt',
            jsonb_build_object('attempt', NEW.attempt_no, 'purpose', NEW.purpose, 'provider', NEW.provider,
                               'model', NEW.model, 'day', NEW.budget_day, 'hold_usd', NEW.hold_usd::text),
            NEW.started_at);
    RETURN NULL;
END
$$;
CREATE TRIGGER attempts_begun AFTER INSERT ON attempts
    FOR EACH ROW EXECUTE FUNCTION attempts_begun();

CREATE FUNCTION attempts_submitted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.job_id, 'submitted',
            jsonb_build_object('attempt', NEW.attempt_no, 'provider_job_id', NEW.provider_job_id), now());
    RETURN NULL;
END
$$;
CREATE TRIGGER attempts_submitted AFTER UPDATE OF state ON attempts
    FOR EACH ROW WHEN (OLD.state = 'submitting' AND NEW.state = 'submitted')
    EXECUTE FUNCTION attempts_submitted();

CREATE FUNCTION attempts_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.job_id, 'attempt_ended',
            jsonb_build_object('attempt', NEW.attempt_no, 'state', NEW.state, 'error_class', NEW.error_class,
                               'usd', NEW.cost_usd::text, 'priced', NEW.cost_usd IS NOT NULL),
            COALESCE(NEW.finished_at, now()));
    RETURN NULL;
END
$$;
CREATE TRIGGER attempts_ended AFTER UPDATE OF state ON attempts
    FOR EACH ROW WHEN (OLD.state IN ('submitting', 'submitted') AND NEW.state IN ('succeeded', 'failed'))
    EXECUTE FUNCTION attempts_ended();

-- Settling moves the hold from reserved to used; a later correction of a
-- settled amount moves used by the difference.
CREATE FUNCTION attempts_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE budget_days
       SET reserved_usd = reserved_usd - CASE WHEN OLD.settled_usd IS NULL THEN NEW.hold_usd ELSE 0 END,
           used_usd = used_usd + NEW.settled_usd - COALESCE(OLD.settled_usd, 0)
     WHERE day = NEW.budget_day;
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.job_id, 'settled',
            jsonb_build_object('attempt', NEW.attempt_no, 'usd', NEW.settled_usd::text,
                               'priced', NEW.cost_usd IS NOT NULL),
            now());
    RETURN NULL;
END
$$;
CREATE TRIGGER attempts_settled AFTER UPDATE OF settled_usd ON attempts
    FOR EACH ROW
    WHEN (NEW.settled_usd IS NOT NULL AND NEW.hold_usd IS NOT NULL AND NEW.settled_usd IS DISTINCT FROM OLD.settled_usd)
    EXECUTE FUNCTION attempts_settled();
