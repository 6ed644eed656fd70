-- The statement triggers of 0012 pair each row's old and new version by id
-- (new_rows JOIN old_rows). PL/pgSQL plans each of their statements once
-- per connection, when the transition tables are as large as that first
-- statement made them: a committer whose first batch held one row kept a
-- nested loop for every later batch, rescanning old_rows once per new row
-- (65 rows: 4,225 comparisons per join, about 1.5 ms, five joins per end
-- of a batch). With nested loops off inside the two functions the pairing
-- is a hash join at every size. The statements of jobs_changed that reach
-- a table which grows (parked, parked_decisions) look it up through its
-- index with `= ANY(ARRAY(...))`, so a hash join never scans them; the
-- budget days are one row a day. JIT is off in them too: a nested loop
-- that cannot be avoided (over LATERAL VALUES) is then costed as disabled,
-- which would pass JIT's threshold and compile each statement (0.3 s).

ALTER FUNCTION attempts_changed() SET enable_nestloop = off SET jit = off;

CREATE OR REPLACE FUNCTION jobs_changed() RETURNS trigger LANGUAGE plpgsql
SET enable_nestloop = off SET jit = off AS $$
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
        WITH claimed AS MATERIALIZED (
            SELECT n.id, n.lease_owner, n.fencing_token
              FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE n.fencing_token <> o.fencing_token AND n.status = 'running'
        ), p AS (
            UPDATE parked SET state = 'recovering', updated_at = now()
              FROM claimed c
             WHERE parked.job_id = ANY (ARRAY(SELECT id FROM claimed))
               AND parked.job_id = c.id AND parked.state IN ('decided', 'recovering')
            RETURNING parked.id AS parked_id, parked.round, c.id AS job_id, c.lease_owner, c.fencing_token
        ), d AS (
            UPDATE parked_decisions
               SET recovery_state = 'claimed', recovery_attempts = recovery_attempts + 1,
                   recovery_token = p.fencing_token
              FROM p
             WHERE parked_decisions.parked_id = ANY (ARRAY(SELECT parked_id FROM p))
               AND parked_decisions.parked_id = p.parked_id AND parked_decisions.round = p.round
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
        WITH ended AS MATERIALIZED (
            SELECT n.id, n.status
              FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE n.status IN ('succeeded', 'failed', 'cancelled')
               AND o.status NOT IN ('succeeded', 'failed', 'cancelled')
        ), p AS (
            UPDATE parked SET state = 'closed', updated_at = now()
              FROM ended e
             WHERE parked.job_id = ANY (ARRAY(SELECT id FROM ended))
               AND parked.job_id = e.id AND parked.state <> 'closed'
            RETURNING parked.id AS parked_id, parked.round, e.id AS job_id, e.status
        ), d AS (
            UPDATE parked_decisions
               SET recovery_state = CASE WHEN p.status = 'succeeded' THEN 'succeeded' ELSE 'failed' END,
                   recovery_ended_at = now()
              FROM p
             WHERE parked_decisions.parked_id = ANY (ARRAY(SELECT parked_id FROM p))
               AND parked_decisions.parked_id = p.parked_id AND parked_decisions.round = p.round
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
