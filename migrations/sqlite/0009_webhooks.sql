-- Signed webhooks (migration 0009, rule 13):
--
-- * A person's endpoints: a URL, the events it wants, its secret (and for
--   24 hours after a rotation the previous one, so deliveries carry both
--   signatures), and why it was disabled when it was.
-- * A person's account secret signs deliveries to a job's own webhook_url.
-- * The outbox: one row per delivery target of a state change, written in
--   the same transaction as the change, under the id `<job>:<event>` (do
--   nothing on conflict, so a re-run writes nothing new), with the exact
--   envelope that is sent, every time, replays included.

CREATE TABLE webhook_endpoints (
    id                   BLOB    PRIMARY KEY CHECK (length(id) = 16),
    user_id              BLOB    NOT NULL REFERENCES users (id),
    url                  TEXT    NOT NULL CHECK (length(url) BETWEEN 1 AND 2000),
    -- ',generation.succeeded,generation.failed,': the events it wants.
    events               TEXT    NOT NULL,
    secret               TEXT    NOT NULL,
    previous_secret      TEXT,
    previous_expires_at  TEXT,
    created_at           TEXT    NOT NULL,
    -- Set by the first failure after a success; five days of it disables.
    failing_since        TEXT,
    disabled_at          TEXT,
    disabled_reason      TEXT,
    deleted_at           TEXT
) STRICT;
CREATE INDEX webhook_endpoints_user ON webhook_endpoints (user_id)
    WHERE disabled_at IS NULL AND deleted_at IS NULL;

CREATE TABLE webhook_secrets (
    user_id    BLOB PRIMARY KEY REFERENCES users (id),
    secret     TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;

CREATE TABLE webhook_deliveries (
    id               BLOB    PRIMARY KEY CHECK (length(id) = 16),
    -- The webhook-id header: `<job id>:<event>`, the same for every try.
    webhook_id       TEXT    NOT NULL,
    -- Which target: 'endpoint:<id>' or 'job' (the job's own webhook_url).
    target           TEXT    NOT NULL,
    endpoint_id      BLOB    REFERENCES webhook_endpoints (id),
    user_id          BLOB    NOT NULL REFERENCES users (id),
    job_id           BLOB    REFERENCES jobs (id),
    event            TEXT    NOT NULL,
    url              TEXT    NOT NULL,
    -- The exact envelope, kept for every try and every replay.
    body             TEXT    NOT NULL,
    state            TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_at          TEXT    NOT NULL,
    last_status      INTEGER,
    last_error       TEXT,
    lease_owner      TEXT,
    lease_expires_at TEXT,
    -- Bumped by every claim: a dispatcher's writes name it (fencing).
    claim_token      INTEGER NOT NULL DEFAULT 0,
    replays          INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT    NOT NULL,
    delivered_at     TEXT,
    UNIQUE (webhook_id, target)
) STRICT;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_user ON webhook_deliveries (user_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_state ON webhook_deliveries (state, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, state, created_at);
