-- The store written once for both backends (migration 0006):
--
-- * Money is whole millionths of a dollar (INTEGER): the breaker's
--   arithmetic and every spend sum run in SQL, exactly (PostgreSQL keeps
--   NUMERIC(12,6)). Existing text amounts are converted.
-- * Every paid attempt holds its own model's estimate against its day
--   (rule 11): the hold, its day and what settled it live on the attempt,
--   and the day's `reserved_usd` and `used_usd` are kept by triggers, so they
--   always equal the sums over the attempts. `reservations` goes away.
-- * A job's progress (its typed step outputs) is one document on the job,
--   written with the run's durable writes; `job_steps` goes away.
-- * The timeline's routine events (created, claimed, attempt, submitted,
--   attempt ended, settled, terminal, released) are written by triggers,
--   and a terminal job settles every hold it still has (rule 11).
--
-- Tables whose column types change are rebuilt (SQLite's twelve steps): the
-- store runs migrations with foreign keys off and checks them after.

CREATE TABLE jobs_new (
    id                  BLOB    PRIMARY KEY CHECK (length(id) = 16),
    user_id             BLOB    NOT NULL REFERENCES users (id),
    kind                TEXT    NOT NULL CHECK (kind IN ('image_edit', 'video')),
    status              TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'parked', 'succeeded', 'failed', 'cancelled')),
    request             TEXT    NOT NULL,
    request_sha256      TEXT    NOT NULL CHECK (length(request_sha256) = 64),
    idempotency_key     TEXT    CHECK (idempotency_key IS NULL OR length(idempotency_key) BETWEEN 1 AND 255),
    credits             INTEGER NOT NULL CHECK (credits > 0),
    -- Millionths of a dollar.
    estimated_usd       INTEGER NOT NULL CHECK (estimated_usd >= 0),
    error               TEXT,
    created_at          TEXT    NOT NULL,
    completed_at        TEXT,
    lease_owner         TEXT,
    -- Written with the database's clock only.
    lease_expires_at    TEXT,
    fencing_token       INTEGER NOT NULL DEFAULT 0,
    output_key          TEXT,
    output_content_type TEXT,
    review              TEXT,
    progress            TEXT,
    CHECK ((status IN ('succeeded', 'failed', 'cancelled')) = (completed_at IS NOT NULL))
) STRICT;
INSERT INTO jobs_new (id, user_id, kind, status, request, request_sha256, idempotency_key, credits,
                      estimated_usd, error, created_at, completed_at, lease_owner, lease_expires_at,
                      fencing_token, output_key, output_content_type, review, progress)
SELECT id, user_id, kind, status, request, request_sha256, idempotency_key, credits,
       CAST(round(CAST(estimated_usd AS REAL) * 1000000) AS INTEGER), error, created_at, completed_at,
       lease_owner, lease_expires_at, fencing_token, output_key, output_content_type, review, NULL
FROM jobs;

CREATE TABLE budget_days_new (
    day           TEXT    PRIMARY KEY,
    cap_usd       INTEGER NOT NULL CHECK (cap_usd >= 0),
    -- Kept by the attempt triggers: the sum of settled amounts, and of
    -- holds not yet settled, of the attempts reserved against this day.
    used_usd      INTEGER NOT NULL DEFAULT 0,
    reserved_usd  INTEGER NOT NULL DEFAULT 0 CHECK (reserved_usd >= 0),
    halted        INTEGER NOT NULL DEFAULT 0 CHECK (halted IN (0, 1)),
    halted_reason TEXT    CHECK (halted_reason IS NULL OR length(halted_reason) <= 500),
    halted_by     BLOB    REFERENCES users (id),
    halted_at     TEXT
) STRICT;
-- A hold a job kept without ever making an attempt is released.
INSERT INTO budget_days_new (day, cap_usd, used_usd, reserved_usd, halted)
SELECT b.day,
       CAST(round(CAST(b.cap_usd AS REAL) * 1000000) AS INTEGER),
       CAST(round(CAST(b.used_usd AS REAL) * 1000000) AS INTEGER),
       max(0, CAST(round(CAST(b.reserved_usd AS REAL) * 1000000) AS INTEGER)
              - COALESCE((SELECT sum(CAST(round(CAST(r.amount_usd AS REAL) * 1000000) AS INTEGER))
                            FROM reservations r
                           WHERE r.day = b.day AND r.state = 'held'
                             AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = r.job_id)), 0)),
       b.halted
FROM budget_days b;

CREATE TABLE attempts_new (
    id              BLOB    PRIMARY KEY CHECK (length(id) = 16),
    job_id          BLOB    NOT NULL REFERENCES jobs (id),
    -- What the call was for: the paid edit or video, or a checker's look.
    purpose         TEXT    NOT NULL DEFAULT 'generate' CHECK (purpose IN ('generate', 'readiness', 'review', 'compare')),
    provider        TEXT    NOT NULL,
    -- Where it was sent: recovery goes to the same place or parks.
    endpoint        TEXT,
    model           TEXT    NOT NULL,
    attempt_no      INTEGER NOT NULL CHECK (attempt_no > 0),
    state           TEXT    NOT NULL CHECK (state IN ('submitting', 'submitted', 'succeeded', 'failed')),
    idempotency_key TEXT    NOT NULL,
    provider_job_id TEXT,
    error_class     TEXT,
    error           TEXT,
    duration_ms     INTEGER,
    usage           TEXT,
    -- Millionths of a dollar; NULL when nobody could price it (never 0).
    cost_usd        INTEGER CHECK (cost_usd IS NULL OR cost_usd >= 0),
    cost_source     TEXT    CHECK (cost_source IS NULL OR cost_source IN ('quoted', 'derived', 'local')),
    -- Rule 11: the estimate held against `budget_day` before the call, and
    -- what settled it (the cost, or the hold when the cost is unknown).
    hold_usd        INTEGER CHECK (hold_usd IS NULL OR hold_usd >= 0),
    budget_day      TEXT    REFERENCES budget_days (day),
    settled_usd     INTEGER CHECK (settled_usd IS NULL OR settled_usd >= 0),
    started_at      TEXT    NOT NULL,
    finished_at     TEXT,
    UNIQUE (job_id, provider, attempt_no),
    CHECK ((cost_usd IS NULL) = (cost_source IS NULL)),
    CHECK ((hold_usd IS NULL) = (budget_day IS NULL)),
    CHECK (settled_usd IS NULL OR hold_usd IS NOT NULL)
) STRICT;
-- A job's old single reservation goes onto its latest attempt.
INSERT INTO attempts_new (id, job_id, provider, model, attempt_no, state, idempotency_key, provider_job_id,
                          error_class, error, duration_ms, usage, cost_usd, cost_source, hold_usd,
                          budget_day, settled_usd, started_at, finished_at)
SELECT a.id, a.job_id, a.provider, a.model, a.attempt_no, a.state, a.idempotency_key, a.provider_job_id,
       a.error_class, a.error, a.duration_ms, a.usage,
       CASE WHEN a.cost_usd IS NULL THEN NULL
            ELSE CAST(round(CAST(a.cost_usd AS REAL) * 1000000) AS INTEGER) END,
       a.cost_source,
       CASE WHEN r.job_id IS NULL THEN NULL
            ELSE CAST(round(CAST(r.amount_usd AS REAL) * 1000000) AS INTEGER) END,
       r.day,
       CASE WHEN r.job_id IS NULL OR r.state = 'held' THEN NULL
            ELSE CAST(round(CAST(COALESCE(r.settled_usd, r.amount_usd) AS REAL) * 1000000) AS INTEGER) END,
       a.started_at, a.finished_at
FROM attempts a
LEFT JOIN reservations r
       ON r.job_id = a.job_id
      AND a.attempt_no = (SELECT max(x.attempt_no) FROM attempts x WHERE x.job_id = a.job_id);

DROP TABLE reservations;
DROP TABLE job_steps;
DROP TABLE attempts;
DROP TABLE budget_days;
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;
ALTER TABLE budget_days_new RENAME TO budget_days;
ALTER TABLE attempts_new RENAME TO attempts;
ALTER TABLE parked DROP COLUMN hold_usd;

CREATE UNIQUE INDEX jobs_idempotency ON jobs (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_user_created ON jobs (user_id, created_at DESC, id DESC);
CREATE INDEX jobs_status ON jobs (status);
-- What a claim looks through: only jobs that are queued or running.
CREATE INDEX jobs_active ON jobs (created_at) WHERE status IN ('queued', 'running');
CREATE INDEX jobs_lease_owner ON jobs (lease_owner) WHERE status = 'running';
CREATE INDEX attempts_job ON attempts (job_id, started_at);
-- Holds not yet settled: the sweeper and the budget page look these up.
CREATE INDEX attempts_held ON attempts (job_id) WHERE settled_usd IS NULL AND hold_usd IS NOT NULL;

-- ---- the timeline and the day's counters, kept by the database ----

CREATE TRIGGER jobs_created AFTER INSERT ON jobs
BEGIN
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.id, 'created',
            json_object('credits', NEW.credits,
                        'estimated_usd', printf('%d.%06d', NEW.estimated_usd / 1000000, NEW.estimated_usd % 1000000)),
            NEW.created_at);
END;

CREATE TRIGGER jobs_claimed AFTER UPDATE OF fencing_token ON jobs
WHEN NEW.fencing_token <> OLD.fencing_token
BEGIN
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.id, 'claimed', json_object('worker', NEW.lease_owner, 'token', NEW.fencing_token),
            strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'));
END;

-- Rule 11: a job that ends settles every hold it still has, from what its
-- attempt recorded (the cost, or the hold when the cost is unknown).
CREATE TRIGGER jobs_ended AFTER UPDATE OF status ON jobs
WHEN NEW.status IN ('succeeded', 'failed', 'cancelled') AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled')
BEGIN
    UPDATE attempts SET settled_usd = COALESCE(cost_usd, hold_usd)
     WHERE job_id = NEW.id AND hold_usd IS NOT NULL AND settled_usd IS NULL;
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.id, NEW.status,
            CASE WHEN NEW.error IS NULL THEN '{}' ELSE json_object('code', json_extract(NEW.error, '$.code')) END,
            NEW.completed_at);
END;

CREATE TRIGGER jobs_released AFTER UPDATE OF status ON jobs
WHEN OLD.status = 'running' AND NEW.status = 'queued'
BEGIN
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.id, 'released', json_object('token', NEW.fencing_token),
            strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'));
END;

-- Rule 11: a paid attempt's hold counts against its day from the moment
-- it is written (before the call).
CREATE TRIGGER attempts_begun AFTER INSERT ON attempts
BEGIN
    UPDATE budget_days SET reserved_usd = reserved_usd + NEW.hold_usd
     WHERE NEW.hold_usd IS NOT NULL AND day = NEW.budget_day;
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.job_id, 'attempt',
            json_object('attempt', NEW.attempt_no, 'purpose', NEW.purpose, 'provider', NEW.provider,
                        'model', NEW.model, 'day', NEW.budget_day,
                        'hold_usd', CASE WHEN NEW.hold_usd IS NULL THEN NULL
                                         ELSE printf('%d.%06d', NEW.hold_usd / 1000000, NEW.hold_usd % 1000000) END),
            NEW.started_at);
END;

CREATE TRIGGER attempts_submitted AFTER UPDATE OF state ON attempts
WHEN OLD.state = 'submitting' AND NEW.state = 'submitted'
BEGIN
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.job_id, 'submitted', json_object('attempt', NEW.attempt_no, 'provider_job_id', NEW.provider_job_id),
            strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'));
END;

CREATE TRIGGER attempts_ended AFTER UPDATE OF state ON attempts
WHEN OLD.state IN ('submitting', 'submitted') AND NEW.state IN ('succeeded', 'failed')
BEGIN
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.job_id, 'attempt_ended',
            json_object('attempt', NEW.attempt_no, 'state', NEW.state, 'error_class', NEW.error_class,
                        'usd', CASE WHEN NEW.cost_usd IS NULL THEN NULL
                                    ELSE printf('%d.%06d', NEW.cost_usd / 1000000, NEW.cost_usd % 1000000) END,
                        'priced', json(CASE WHEN NEW.cost_usd IS NULL THEN 'false' ELSE 'true' END)),
            COALESCE(NEW.finished_at, strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')));
END;

-- Settling moves the hold from reserved to used; a later correction of a
-- settled amount moves used by the difference.
CREATE TRIGGER attempts_settled AFTER UPDATE OF settled_usd ON attempts
WHEN NEW.settled_usd IS NOT NULL AND NEW.hold_usd IS NOT NULL AND NEW.settled_usd IS NOT OLD.settled_usd
BEGIN
    UPDATE budget_days
       SET reserved_usd = reserved_usd - CASE WHEN OLD.settled_usd IS NULL THEN NEW.hold_usd ELSE 0 END,
           used_usd = used_usd + NEW.settled_usd - COALESCE(OLD.settled_usd, 0)
     WHERE day = NEW.budget_day;
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.job_id, 'settled',
            json_object('attempt', NEW.attempt_no,
                        'usd', printf('%d.%06d', NEW.settled_usd / 1000000, NEW.settled_usd % 1000000),
                        'priced', json(CASE WHEN NEW.cost_usd IS NULL THEN 'false' ELSE 'true' END)),
            strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'));
END;

