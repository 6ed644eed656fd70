-- Sessions a person can end (migration 0010): a session started before
-- `sessions_valid_after` is no longer honoured. A password change sets it
-- (the session that changed it is stamped anew), and so does disabling the
-- account.
ALTER TABLE users ADD COLUMN sessions_valid_after timestamptz;
