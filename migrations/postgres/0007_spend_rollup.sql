-- Spend you can read fast (migration 0007): what every call cost, rolled up
-- per day, provider, model and error class in the same transaction as the
-- attempt's own write (a trigger), so a month of spend is a few rows to read
-- however many attempts there were. Priced and unpriced are kept apart: an
-- attempt with no known cost adds to `unpriced`, never 0 to `priced_usd`.
-- A test compares the rollup with a plain sum over the attempts.

CREATE TABLE spend_rollup (
    day          date          NOT NULL,
    provider     text          NOT NULL,
    model        text          NOT NULL,
    -- '' for attempts without an error class.
    error_class  text          NOT NULL,
    attempts     bigint        NOT NULL DEFAULT 0,
    -- The sum of known costs only.
    priced_usd   numeric(14,6) NOT NULL DEFAULT 0,
    priced       bigint        NOT NULL DEFAULT 0,
    -- Finished without a known cost.
    unpriced     bigint        NOT NULL DEFAULT 0,
    PRIMARY KEY (day, provider, model, error_class)
);

-- The day an attempt counts on: the day it held budget against, or the day
-- it started when it held none.
INSERT INTO spend_rollup (day, provider, model, error_class, attempts, priced_usd, priced, unpriced)
SELECT COALESCE(budget_day, (started_at AT TIME ZONE 'UTC')::date), provider, model, COALESCE(error_class, ''),
       count(*), COALESCE(sum(cost_usd), 0), count(cost_usd),
       count(*) FILTER (WHERE cost_usd IS NULL AND state IN ('succeeded', 'failed'))
FROM attempts GROUP BY 1, 2, 3, 4;

-- A day's budget row is locked before any of its rollup rows, as every
-- hold and settlement locks it first: two transactions then always take
-- the rows in one order (budget, then rollup) and cannot deadlock.
CREATE FUNCTION attempts_spend() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        PERFORM 1 FROM budget_days
          WHERE day = COALESCE(OLD.budget_day, (OLD.started_at AT TIME ZONE 'UTC')::date) FOR UPDATE;
        INSERT INTO spend_rollup (day, provider, model, error_class, attempts, priced_usd, priced, unpriced)
        VALUES (COALESCE(OLD.budget_day, (OLD.started_at AT TIME ZONE 'UTC')::date), OLD.provider, OLD.model,
                COALESCE(OLD.error_class, ''), -1, -COALESCE(OLD.cost_usd, 0),
                -(OLD.cost_usd IS NOT NULL)::int,
                -(OLD.cost_usd IS NULL AND OLD.state IN ('succeeded', 'failed'))::int)
        ON CONFLICT (day, provider, model, error_class) DO UPDATE SET
            attempts = spend_rollup.attempts + excluded.attempts,
            priced_usd = spend_rollup.priced_usd + excluded.priced_usd,
            priced = spend_rollup.priced + excluded.priced,
            unpriced = spend_rollup.unpriced + excluded.unpriced;
    END IF;
    PERFORM 1 FROM budget_days
      WHERE day = COALESCE(NEW.budget_day, (NEW.started_at AT TIME ZONE 'UTC')::date) FOR UPDATE;
    INSERT INTO spend_rollup (day, provider, model, error_class, attempts, priced_usd, priced, unpriced)
    VALUES (COALESCE(NEW.budget_day, (NEW.started_at AT TIME ZONE 'UTC')::date), NEW.provider, NEW.model,
            COALESCE(NEW.error_class, ''), 1, COALESCE(NEW.cost_usd, 0),
            (NEW.cost_usd IS NOT NULL)::int,
            (NEW.cost_usd IS NULL AND NEW.state IN ('succeeded', 'failed'))::int)
    ON CONFLICT (day, provider, model, error_class) DO UPDATE SET
        attempts = spend_rollup.attempts + excluded.attempts,
        priced_usd = spend_rollup.priced_usd + excluded.priced_usd,
        priced = spend_rollup.priced + excluded.priced,
        unpriced = spend_rollup.unpriced + excluded.unpriced;
    RETURN NULL;
END
$$;
CREATE TRIGGER attempts_spend_added AFTER INSERT ON attempts
    FOR EACH ROW EXECUTE FUNCTION attempts_spend();
-- Only a change the rollup counts moves it (not `submitting` to `submitted`).
CREATE TRIGGER attempts_spend_changed AFTER UPDATE OF state, cost_usd, error_class ON attempts
    FOR EACH ROW
    WHEN (OLD.cost_usd IS DISTINCT FROM NEW.cost_usd
          OR OLD.error_class IS DISTINCT FROM NEW.error_class
          OR (OLD.state IN ('succeeded', 'failed')) <> (NEW.state IN ('succeeded', 'failed')))
    EXECUTE FUNCTION attempts_spend();

-- The attempts of a day, for the spend page's list.
CREATE INDEX attempts_day ON attempts (budget_day, started_at);

-- Who changed a day's breaker, when and why: caps set, halts and resumes,
-- in order (the budget page shows a day's history from here).
CREATE TABLE budget_changes (
    id      bigserial     PRIMARY KEY,
    day     date          NOT NULL,
    change  text          NOT NULL CHECK (change IN ('cap', 'halt', 'resume')),
    -- The cap set, for a 'cap' change.
    cap_usd numeric(14,6),
    reason  text          CHECK (reason IS NULL OR length(reason) <= 500),
    by_user uuid          REFERENCES users (id),
    at      timestamptz   NOT NULL
);

CREATE INDEX budget_changes_day ON budget_changes (day, id);
