-- The timeline, the day's counters and the spend rollup, kept per statement
-- (migration 0012, PostgreSQL only). A group commit writes many runs' ops
-- of one kind in one statement; the triggers that keep the timeline, the
-- budget counters and the rollup now run once per statement over its
-- transition tables, set-based, instead of once per row. What they write is
-- unchanged, and so is the order of a job's own events: a claim before its
-- recovery's claim; an attempt's end before its settlement; the settlement
-- of what a terminal write leaves held before the terminal event, and the
-- terminal event before its review's closing. (SQLite keeps its row
-- triggers: it has no transition tables, and its statements cost
-- microseconds.)

DROP TRIGGER jobs_claimed ON jobs;
DROP TRIGGER jobs_recovery_claimed ON jobs;
DROP TRIGGER jobs_ended ON jobs;
DROP TRIGGER jobs_parked_closed ON jobs;
DROP TRIGGER jobs_released ON jobs;
DROP FUNCTION jobs_claimed();
DROP FUNCTION jobs_recovery_claimed();
DROP FUNCTION jobs_ended();
DROP FUNCTION jobs_parked_closed();
DROP FUNCTION jobs_released();

DROP TRIGGER attempts_begun ON attempts;
DROP TRIGGER attempts_spend_added ON attempts;
DROP TRIGGER attempts_submitted ON attempts;
DROP TRIGGER attempts_ended ON attempts;
DROP TRIGGER attempts_settled ON attempts;
DROP TRIGGER attempts_spend_changed ON attempts;
DROP FUNCTION attempts_begun();
DROP FUNCTION attempts_submitted();
DROP FUNCTION attempts_ended();
DROP FUNCTION attempts_settled();
DROP FUNCTION attempts_spend();

CREATE FUNCTION jobs_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    claimed_n bigint;
    ended_n bigint;
    released_n bigint;
BEGIN
    -- Most updates (progress, leases) change none of this: one look says
    -- which parts have work, and only those run.
    SELECT count(*) FILTER (WHERE n.fencing_token <> o.fencing_token),
           count(*) FILTER (WHERE n.status IN ('succeeded', 'failed', 'cancelled')
                              AND o.status NOT IN ('succeeded', 'failed', 'cancelled')),
           count(*) FILTER (WHERE o.status = 'running' AND n.status = 'queued')
      INTO claimed_n, ended_n, released_n
      FROM new_rows n JOIN old_rows o ON o.id = n.id;

    IF claimed_n > 0 THEN
        -- Rule 5: each claim (a new fencing token) is on the timeline.
        INSERT INTO job_events (job_id, kind, detail, created_at)
        SELECT n.id, 'claimed', jsonb_build_object('worker', n.lease_owner, 'token', n.fencing_token), now()
          FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE n.fencing_token <> o.fencing_token
         ORDER BY n.id;

        -- A claimed job whose record holds an approved recovery: the job's claim
        -- is the recovery's claim (its lease and fencing token are the
        -- recovery's), so the claim is atomic, leased and fenced by construction.
        WITH claimed AS (
            SELECT n.id, n.lease_owner, n.fencing_token
              FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE n.fencing_token <> o.fencing_token AND n.status = 'running'
        ), p AS (
            UPDATE parked SET state = 'recovering', updated_at = now()
              FROM claimed c
             WHERE parked.job_id = c.id AND parked.state IN ('decided', 'recovering')
            RETURNING parked.id AS parked_id, parked.round, c.id AS job_id, c.lease_owner, c.fencing_token
        ), d AS (
            UPDATE parked_decisions
               SET recovery_state = 'claimed', recovery_attempts = recovery_attempts + 1,
                   recovery_token = p.fencing_token
              FROM p
             WHERE parked_decisions.parked_id = p.parked_id AND parked_decisions.round = p.round
               AND parked_decisions.recovery_state IN ('pending', 'claimed')
            RETURNING parked_decisions.parked_id, parked_decisions.action
        )
        INSERT INTO job_events (job_id, kind, detail, created_at)
        SELECT p.job_id, 'recovery_claimed',
               jsonb_build_object('action', d.action, 'worker', p.lease_owner, 'token', p.fencing_token), now()
          FROM p LEFT JOIN d ON d.parked_id = p.parked_id
         ORDER BY p.job_id;
    END IF;

    IF ended_n > 0 THEN
        -- Rule 11: a job that ends settles every hold it still has, from what
        -- its attempt recorded (the cost, or the hold when the cost is unknown).
        -- Through the index of held attempts, whatever the plan's guess.
        UPDATE attempts a SET settled_usd = COALESCE(a.cost_usd, a.hold_usd)
         WHERE a.hold_usd IS NOT NULL AND a.settled_usd IS NULL
           AND a.job_id = ANY (ARRAY(
               SELECT n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
                WHERE n.status IN ('succeeded', 'failed', 'cancelled')
                  AND o.status NOT IN ('succeeded', 'failed', 'cancelled')));
        INSERT INTO job_events (job_id, kind, detail, created_at)
        SELECT n.id, n.status,
               CASE WHEN n.error IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('code', n.error -> 'code') END,
               n.completed_at
          FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE n.status IN ('succeeded', 'failed', 'cancelled')
           AND o.status NOT IN ('succeeded', 'failed', 'cancelled')
         ORDER BY n.id;

        -- A job that ends closes its record: the outcome is verified then, not
        -- when a worker picks the recovery up.
        WITH ended AS (
            SELECT n.id, n.status
              FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE n.status IN ('succeeded', 'failed', 'cancelled')
               AND o.status NOT IN ('succeeded', 'failed', 'cancelled')
        ), p AS (
            UPDATE parked SET state = 'closed', updated_at = now()
              FROM ended e
             WHERE parked.job_id = e.id AND parked.state <> 'closed'
            RETURNING parked.id AS parked_id, parked.round, e.id AS job_id, e.status
        ), d AS (
            UPDATE parked_decisions
               SET recovery_state = CASE WHEN p.status = 'succeeded' THEN 'succeeded' ELSE 'failed' END,
                   recovery_ended_at = now()
              FROM p
             WHERE parked_decisions.parked_id = p.parked_id AND parked_decisions.round = p.round
               AND parked_decisions.recovery_state IN ('pending', 'claimed')
        )
        INSERT INTO job_events (job_id, kind, detail, created_at)
        SELECT p.job_id, 'review_closed', jsonb_build_object('outcome', p.status), now()
          FROM p
         ORDER BY p.job_id;
    END IF;

    IF released_n > 0 THEN
        INSERT INTO job_events (job_id, kind, detail, created_at)
        SELECT n.id, 'released', jsonb_build_object('token', n.fencing_token), now()
          FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE o.status = 'running' AND n.status = 'queued'
         ORDER BY n.id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_changed AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_changed();

-- A day's budget row is locked before any of its rollup rows, as every
-- hold and settlement locks it first: two transactions then always take
-- the rows in one order (budget, then rollup) and cannot deadlock.
CREATE FUNCTION attempts_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM budget_days
      WHERE day IN (SELECT COALESCE(budget_day, (started_at AT TIME ZONE 'UTC')::date) FROM new_rows)
      ORDER BY day FOR UPDATE;
    -- Rule 11: a paid attempt's hold counts against its day from the
    -- moment it is written (before the call).
    UPDATE budget_days b SET reserved_usd = b.reserved_usd + s.held
      FROM (SELECT budget_day, sum(hold_usd) AS held FROM new_rows
             WHERE hold_usd IS NOT NULL GROUP BY budget_day) s
     WHERE b.day = s.budget_day;
    INSERT INTO job_events (job_id, kind, detail, created_at)
    SELECT job_id, 'attempt',
           jsonb_build_object('attempt', attempt_no, 'purpose', purpose, 'provider', provider,
                              'model', model, 'day', budget_day, 'hold_usd', hold_usd::text),
           started_at
      FROM new_rows
     ORDER BY job_id, attempt_no;
    INSERT INTO spend_rollup (day, provider, model, error_class, attempts, priced_usd, priced, unpriced)
    SELECT COALESCE(budget_day, (started_at AT TIME ZONE 'UTC')::date), provider, model,
           COALESCE(error_class, ''), count(*), COALESCE(sum(cost_usd), 0), count(cost_usd),
           count(*) FILTER (WHERE cost_usd IS NULL AND state IN ('succeeded', 'failed'))
      FROM new_rows
     GROUP BY 1, 2, 3, 4
     ORDER BY 1, 2, 3, 4
    ON CONFLICT (day, provider, model, error_class) DO UPDATE SET
        attempts = spend_rollup.attempts + excluded.attempts,
        priced_usd = spend_rollup.priced_usd + excluded.priced_usd,
        priced = spend_rollup.priced + excluded.priced,
        unpriced = spend_rollup.unpriced + excluded.unpriced;
    RETURN NULL;
END
$$;
CREATE TRIGGER attempts_added AFTER INSERT ON attempts
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION attempts_added();

CREATE FUNCTION attempts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ended_n bigint;
    settled_n bigint;
    spend_n bigint;
    submitted_n bigint;
BEGIN
    SELECT count(*) FILTER (WHERE o.state IN ('submitting', 'submitted') AND n.state IN ('succeeded', 'failed')),
           count(*) FILTER (WHERE n.settled_usd IS NOT NULL AND n.hold_usd IS NOT NULL
                              AND n.settled_usd IS DISTINCT FROM o.settled_usd),
           count(*) FILTER (WHERE o.cost_usd IS DISTINCT FROM n.cost_usd
                              OR o.error_class IS DISTINCT FROM n.error_class
                              OR (o.state IN ('succeeded', 'failed')) <> (n.state IN ('succeeded', 'failed'))),
           count(*) FILTER (WHERE o.state = 'submitting' AND n.state = 'submitted')
      INTO ended_n, settled_n, spend_n, submitted_n
      FROM new_rows n JOIN old_rows o ON o.id = n.id;

    IF ended_n > 0 THEN
        INSERT INTO job_events (job_id, kind, detail, created_at)
        SELECT n.job_id, 'attempt_ended',
               jsonb_build_object('attempt', n.attempt_no, 'state', n.state, 'error_class', n.error_class,
                                  'usd', n.cost_usd::text, 'priced', n.cost_usd IS NOT NULL),
               COALESCE(n.finished_at, now())
          FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE o.state IN ('submitting', 'submitted') AND n.state IN ('succeeded', 'failed')
         ORDER BY n.job_id, n.attempt_no;
    END IF;

    IF settled_n > 0 OR spend_n > 0 THEN
        -- The days whose counters or rollup rows move, locked first, in order.
        PERFORM 1 FROM budget_days
          WHERE day IN (
            SELECT COALESCE(x.budget_day, (x.started_at AT TIME ZONE 'UTC')::date)
              FROM new_rows n JOIN old_rows o ON o.id = n.id,
                   LATERAL (VALUES (o.budget_day, o.started_at), (n.budget_day, n.started_at)) x(budget_day, started_at)
             WHERE (n.settled_usd IS NOT NULL AND n.hold_usd IS NOT NULL AND n.settled_usd IS DISTINCT FROM o.settled_usd)
                OR o.cost_usd IS DISTINCT FROM n.cost_usd
                OR o.error_class IS DISTINCT FROM n.error_class
                OR (o.state IN ('succeeded', 'failed')) <> (n.state IN ('succeeded', 'failed')))
          ORDER BY day FOR UPDATE;
    END IF;

    IF settled_n > 0 THEN
        -- Settling moves the hold from reserved to used; a later correction of
        -- a settled amount moves used by the difference.
        UPDATE budget_days b
           SET reserved_usd = b.reserved_usd - s.released, used_usd = b.used_usd + s.used
          FROM (SELECT n.budget_day,
                       sum(CASE WHEN o.settled_usd IS NULL THEN n.hold_usd ELSE 0 END) AS released,
                       sum(n.settled_usd - COALESCE(o.settled_usd, 0)) AS used
                  FROM new_rows n JOIN old_rows o ON o.id = n.id
                 WHERE n.settled_usd IS NOT NULL AND n.hold_usd IS NOT NULL
                   AND n.settled_usd IS DISTINCT FROM o.settled_usd
                 GROUP BY n.budget_day) s
         WHERE b.day = s.budget_day;
        INSERT INTO job_events (job_id, kind, detail, created_at)
        SELECT n.job_id, 'settled',
               jsonb_build_object('attempt', n.attempt_no, 'usd', n.settled_usd::text, 'priced', n.cost_usd IS NOT NULL),
               now()
          FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE n.settled_usd IS NOT NULL AND n.hold_usd IS NOT NULL
           AND n.settled_usd IS DISTINCT FROM o.settled_usd
         ORDER BY n.job_id, n.attempt_no;
    END IF;

    IF spend_n > 0 THEN
        -- Only a change the rollup counts moves it (not `submitting` to
        -- `submitted`): the old row's share out, the new row's in.
        INSERT INTO spend_rollup (day, provider, model, error_class, attempts, priced_usd, priced, unpriced)
        SELECT day, provider, model, error_class, sum(attempts), sum(priced_usd), sum(priced), sum(unpriced)
          FROM (
            SELECT COALESCE(r.budget_day, (r.started_at AT TIME ZONE 'UTC')::date) AS day, r.provider, r.model,
                   COALESCE(r.error_class, '') AS error_class, r.sign AS attempts,
                   r.sign * COALESCE(r.cost_usd, 0) AS priced_usd,
                   r.sign * (r.cost_usd IS NOT NULL)::int AS priced,
                   r.sign * (r.cost_usd IS NULL AND r.state IN ('succeeded', 'failed'))::int AS unpriced
              FROM new_rows n JOIN old_rows o ON o.id = n.id,
                   LATERAL (VALUES
                     (-1, o.budget_day, o.started_at, o.provider, o.model, o.error_class, o.cost_usd, o.state),
                     (1, n.budget_day, n.started_at, n.provider, n.model, n.error_class, n.cost_usd, n.state)
                   ) r(sign, budget_day, started_at, provider, model, error_class, cost_usd, state)
             WHERE o.cost_usd IS DISTINCT FROM n.cost_usd
                OR o.error_class IS DISTINCT FROM n.error_class
                OR (o.state IN ('succeeded', 'failed')) <> (n.state IN ('succeeded', 'failed'))
          ) c
         GROUP BY 1, 2, 3, 4
         ORDER BY 1, 2, 3, 4
        ON CONFLICT (day, provider, model, error_class) DO UPDATE SET
            attempts = spend_rollup.attempts + excluded.attempts,
            priced_usd = spend_rollup.priced_usd + excluded.priced_usd,
            priced = spend_rollup.priced + excluded.priced,
            unpriced = spend_rollup.unpriced + excluded.unpriced;
    END IF;

    IF submitted_n > 0 THEN
        INSERT INTO job_events (job_id, kind, detail, created_at)
        SELECT n.job_id, 'submitted',
               jsonb_build_object('attempt', n.attempt_no, 'provider_job_id', n.provider_job_id), now()
          FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE o.state = 'submitting' AND n.state = 'submitted'
         ORDER BY n.job_id, n.attempt_no;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER attempts_changed AFTER UPDATE ON attempts
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION attempts_changed();

-- A run's progress and an attempt's `submitted` change no indexed column:
-- with room left on the page, PostgreSQL writes them as heap-only tuples
-- (no new index entries). New pages keep that room.
ALTER TABLE jobs SET (fillfactor = 70);
ALTER TABLE attempts SET (fillfactor = 70);
