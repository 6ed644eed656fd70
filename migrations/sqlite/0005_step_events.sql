-- A completed step puts itself on the job's timeline: the event is written
-- by the insert that records the step, so a checkpoint is one statement.
CREATE TRIGGER job_steps_event AFTER INSERT ON job_steps
BEGIN
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.job_id, 'step', json_object('step', NEW.step), NEW.completed_at);
END;
