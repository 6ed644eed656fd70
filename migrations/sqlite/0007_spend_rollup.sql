-- Spend you can read fast (migration 0007): what every call cost, rolled up
-- per day, provider, model and error class in the same transaction as the
-- attempt's own write (triggers), so a month of spend is a few rows to read
-- however many attempts there were. Priced and unpriced are kept apart: an
-- attempt with no known cost adds to `unpriced`, never 0 to `priced_usd`.
-- A test compares the rollup with a plain sum over the attempts.

CREATE TABLE spend_rollup (
    day          TEXT    NOT NULL,
    provider     TEXT    NOT NULL,
    model        TEXT    NOT NULL,
    -- '' for attempts without an error class.
    error_class  TEXT    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    -- Millionths of a dollar: the sum of known costs only.
    priced_usd   INTEGER NOT NULL DEFAULT 0,
    priced       INTEGER NOT NULL DEFAULT 0,
    -- Finished without a known cost.
    unpriced     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (day, provider, model, error_class)
) STRICT;

-- The day an attempt counts on: the day it held budget against, or the
-- day it started when it held none.
INSERT INTO spend_rollup (day, provider, model, error_class, attempts, priced_usd, priced, unpriced)
SELECT COALESCE(budget_day, substr(started_at, 1, 10)), provider, model, COALESCE(error_class, ''),
       count(*), COALESCE(sum(cost_usd), 0), count(cost_usd),
       sum(CASE WHEN cost_usd IS NULL AND state IN ('succeeded', 'failed') THEN 1 ELSE 0 END)
FROM attempts GROUP BY 1, 2, 3, 4;

-- What an attempt adds to its row, as it is inserted and as it changes.
CREATE TRIGGER attempts_spend_added AFTER INSERT ON attempts
BEGIN
    INSERT INTO spend_rollup (day, provider, model, error_class, attempts, priced_usd, priced, unpriced)
    VALUES (COALESCE(NEW.budget_day, substr(NEW.started_at, 1, 10)), NEW.provider, NEW.model,
            COALESCE(NEW.error_class, ''), 1, COALESCE(NEW.cost_usd, 0),
            NEW.cost_usd IS NOT NULL,
            NEW.cost_usd IS NULL AND NEW.state IN ('succeeded', 'failed'))
    ON CONFLICT (day, provider, model, error_class) DO UPDATE SET
        attempts = attempts + excluded.attempts,
        priced_usd = priced_usd + excluded.priced_usd,
        priced = priced + excluded.priced,
        unpriced = unpriced + excluded.unpriced;
END;

-- Only a change the rollup counts moves it (not `submitting` to `submitted`).
CREATE TRIGGER attempts_spend_changed AFTER UPDATE OF state, cost_usd, error_class ON attempts
WHEN OLD.cost_usd IS NOT NEW.cost_usd
  OR OLD.error_class IS NOT NEW.error_class
  OR (OLD.state IN ('succeeded', 'failed')) <> (NEW.state IN ('succeeded', 'failed'))
BEGIN
    INSERT INTO spend_rollup (day, provider, model, error_class, attempts, priced_usd, priced, unpriced)
    VALUES (COALESCE(OLD.budget_day, substr(OLD.started_at, 1, 10)), OLD.provider, OLD.model,
            COALESCE(OLD.error_class, ''), -1, -COALESCE(OLD.cost_usd, 0),
            -(OLD.cost_usd IS NOT NULL),
            -(OLD.cost_usd IS NULL AND OLD.state IN ('succeeded', 'failed')))
    ON CONFLICT (day, provider, model, error_class) DO UPDATE SET
        attempts = attempts + excluded.attempts,
        priced_usd = priced_usd + excluded.priced_usd,
        priced = priced + excluded.priced,
        unpriced = unpriced + excluded.unpriced;
    INSERT INTO spend_rollup (day, provider, model, error_class, attempts, priced_usd, priced, unpriced)
    VALUES (COALESCE(NEW.budget_day, substr(NEW.started_at, 1, 10)), NEW.provider, NEW.model,
            COALESCE(NEW.error_class, ''), 1, COALESCE(NEW.cost_usd, 0),
            NEW.cost_usd IS NOT NULL,
            NEW.cost_usd IS NULL AND NEW.state IN ('succeeded', 'failed'))
    ON CONFLICT (day, provider, model, error_class) DO UPDATE SET
        attempts = attempts + excluded.attempts,
        priced_usd = priced_usd + excluded.priced_usd,
        priced = priced + excluded.priced,
        unpriced = unpriced + excluded.unpriced;
END;

-- The attempts of a day, for the spend page's list.
CREATE INDEX attempts_day ON attempts (budget_day, started_at);

-- Who changed a day's breaker, when and why: caps set, halts and resumes,
-- in order (the budget page shows a day's history from here).
CREATE TABLE budget_changes (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    day     TEXT    NOT NULL,
    change  TEXT    NOT NULL CHECK (change IN ('cap', 'halt', 'resume')),
    -- Millionths of a dollar: the cap set, for a 'cap' change.
    cap_usd INTEGER,
    reason  TEXT    CHECK (reason IS NULL OR length(reason) <= 500),
    by_user BLOB    REFERENCES users (id),
    at      TEXT    NOT NULL
) STRICT;

CREATE INDEX budget_changes_day ON budget_changes (day, id);
