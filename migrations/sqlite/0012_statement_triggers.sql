-- Migration 0012 moves PostgreSQL's timeline, budget and rollup triggers
-- from one run per row to one per statement (over transition tables), so a
-- group commit's set-based statements keep them set-based. SQLite has no
-- transition tables and its in-process statements cost microseconds: its
-- row triggers (migrations 0006 to 0008) stay as they are.
SELECT 1;
