-- Issue 33, 11: spend by token. A job made with an API token names it, so
-- the spend page can say what each integration cost; a job made from the
-- pages (a session) has none. Jobs made before this knew no token.
ALTER TABLE jobs ADD COLUMN token_id BLOB REFERENCES api_tokens (id);
