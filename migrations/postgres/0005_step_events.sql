-- A completed step puts itself on the job's timeline: the event is written
-- by the insert that records the step, so a checkpoint is one statement.
CREATE FUNCTION job_steps_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events (job_id, kind, detail, created_at)
    VALUES (NEW.job_id, 'step', jsonb_build_object('step', NEW.step), NEW.completed_at);
    RETURN NULL;
END
$$;
CREATE TRIGGER job_steps_event AFTER INSERT ON job_steps
    FOR EACH ROW EXECUTE FUNCTION job_steps_event();
