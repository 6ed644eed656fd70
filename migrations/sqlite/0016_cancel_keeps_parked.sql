-- A record closes only by a decision (rule 12). An owner who cancels a
-- parked job gets their credits back (the cancel's refund), but the
-- provider may already have been paid and nobody has looked: the record
-- stays open for a reviewer, with its stage and its holds. A record whose
-- recovery was approved but not finished returns to `open` in the next
-- round (that recovery failed: the job it would have finished is gone).
-- A job that succeeds or fails still closes its record and settles its
-- holds, as before.

DROP TRIGGER jobs_ended;
CREATE TRIGGER jobs_ended AFTER UPDATE OF status ON jobs
WHEN NEW.status IN ('succeeded', 'failed', 'cancelled') AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled')
BEGIN
    -- Rule 11: a job that ends settles every hold it still has, but a
    -- cancelled job's holds stay while its record waits for a reviewer.
    UPDATE attempts SET settled_usd = COALESCE(cost_usd, hold_usd)
     WHERE job_id = NEW.id AND hold_usd IS NOT NULL AND settled_usd IS NULL
       AND NOT (NEW.status = 'cancelled'
                AND EXISTS (SELECT 1 FROM parked WHERE job_id = NEW.id AND state <> 'closed'));
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.id, NEW.status,
            CASE WHEN NEW.error IS NULL THEN '{}' ELSE json_object('code', json_extract(NEW.error, '$.code')) END,
            NEW.completed_at);
END;

DROP TRIGGER jobs_parked_closed;
CREATE TRIGGER jobs_parked_closed AFTER UPDATE OF status ON jobs
WHEN NEW.status IN ('succeeded', 'failed') AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled')
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

CREATE TRIGGER jobs_cancelled_while_parked AFTER UPDATE OF status ON jobs
WHEN NEW.status = 'cancelled' AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled')
BEGIN
    UPDATE parked_decisions
       SET recovery_state = 'failed',
           recovery_ended_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')
     WHERE recovery_state IN ('pending', 'claimed')
       AND (parked_id, round) IN (SELECT id, round FROM parked
                                   WHERE job_id = NEW.id AND state IN ('decided', 'recovering'));
    INSERT INTO job_events (job_id, kind, detail, created_at)
    SELECT NEW.id, 'cancelled_while_parked', json_object('stage', stage),
           strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')
      FROM parked WHERE job_id = NEW.id AND state <> 'closed';
    UPDATE parked
       SET round = round + CASE WHEN state IN ('decided', 'recovering') THEN 1 ELSE 0 END,
           state = 'open', updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')
     WHERE job_id = NEW.id AND state <> 'closed';
END;
