-- Migration 0015 changes how PostgreSQL plans the pairing of old and new
-- rows inside its statement triggers (0012). SQLite's row triggers see one
-- row at a time and pair nothing: nothing changes here.
SELECT 1;
