-- Issue 29, 7: the account webhook secret (it signs deliveries to a job's
-- own webhook_url) can be rotated like an endpoint's: the previous secret
-- keeps signing, beside the new one, until previous_expires_at.
ALTER TABLE webhook_secrets ADD COLUMN previous_secret TEXT;
ALTER TABLE webhook_secrets ADD COLUMN previous_expires_at TEXT;
