-- A record closes only by a decision (rule 12). An owner who cancels a
-- parked job gets their credits back (the cancel's refund), but the
-- provider may already have been paid and nobody has looked: the record
-- stays open for a reviewer, with its stage and its holds. A record whose
-- recovery was approved but not finished returns to `open` in the next
-- round (that recovery failed: the job it would have finished is gone).
-- A job that succeeds or fails still closes its record and settles its
-- holds, as before. jobs_changed() is 0015's but for those parts.

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
        -- A cancelled job's holds stay while its record waits for a reviewer.
        UPDATE attempts a SET settled_usd = COALESCE(a.cost_usd, a.hold_usd)
         WHERE a.hold_usd IS NOT NULL AND a.settled_usd IS NULL
           AND a.job_id = ANY (ARRAY(
               SELECT n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
                WHERE n.status IN ('succeeded', 'failed', 'cancelled')
                  AND o.status NOT IN ('succeeded', 'failed', 'cancelled')
                  AND NOT (n.status = 'cancelled' AND EXISTS (
                      SELECT 1 FROM parked WHERE parked.job_id = n.id AND parked.state <> 'closed'))));
        INSERT INTO job_events (job_id, kind, detail, created_at)
        SELECT n.id, n.status,
               CASE WHEN n.error IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('code', n.error -> 'code') END,
               n.completed_at
          FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE n.status IN ('succeeded', 'failed', 'cancelled')
           AND o.status NOT IN ('succeeded', 'failed', 'cancelled')
         ORDER BY n.id;

        -- A job that succeeds or fails closes its record: the outcome is
        -- verified then, not when a worker picks the recovery up.
        WITH ended AS MATERIALIZED (
            SELECT n.id, n.status
              FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE n.status IN ('succeeded', 'failed')
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

        -- A cancelled job's record stays for a reviewer (rule 12: a record
        -- closes only by a decision): an approved recovery it can no longer
        -- run failed, and the record is open again in the next round.
        WITH cancelled AS MATERIALIZED (
            SELECT n.id
              FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE n.status = 'cancelled'
               AND o.status NOT IN ('succeeded', 'failed', 'cancelled')
        ), p AS (
            UPDATE parked
               SET round = parked.round + CASE WHEN parked.state IN ('decided', 'recovering') THEN 1 ELSE 0 END,
                   state = 'open', updated_at = now()
              FROM cancelled c
             WHERE parked.job_id = ANY (ARRAY(SELECT id FROM cancelled))
               AND parked.job_id = c.id AND parked.state <> 'closed'
            RETURNING parked.id AS parked_id, parked.round, parked.stage, c.id AS job_id
        ), d AS (
            UPDATE parked_decisions
               SET recovery_state = 'failed', recovery_ended_at = now()
              FROM p
             WHERE parked_decisions.parked_id = ANY (ARRAY(SELECT parked_id FROM p))
               AND parked_decisions.parked_id = p.parked_id AND parked_decisions.round = p.round - 1
               AND parked_decisions.recovery_state IN ('pending', 'claimed')
        )
        INSERT INTO job_events (job_id, kind, detail, created_at)
        SELECT p.job_id, 'cancelled_while_parked', jsonb_build_object('stage', p.stage), now()
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
