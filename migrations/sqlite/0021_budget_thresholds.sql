-- Issue 33, 11: a day's spend passing 50, 80 and 95% of its cap is told
-- once. One row per day and share, written by whoever first sees the day
-- past it (the key makes the second writer a no-op), with what was booked
-- and the cap at that moment.
CREATE TABLE budget_thresholds (
    day        TEXT    NOT NULL REFERENCES budget_days (day),
    percent    INTEGER NOT NULL CHECK (percent BETWEEN 1 AND 100),
    crossed_at TEXT    NOT NULL,
    booked_usd INTEGER NOT NULL CHECK (booked_usd >= 0),
    cap_usd    INTEGER NOT NULL CHECK (cap_usd >= 0),
    PRIMARY KEY (day, percent)
) STRICT;
