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
    id                   uuid        PRIMARY KEY,
    user_id              uuid        NOT NULL REFERENCES users (id),
    url                  text        NOT NULL CHECK (length(url) BETWEEN 1 AND 2000),
    -- ',generation.succeeded,generation.failed,': the events it wants.
    events               text        NOT NULL,
    secret               text        NOT NULL,
    previous_secret      text,
    previous_expires_at  timestamptz,
    created_at           timestamptz NOT NULL,
    -- Set by the first failure after a success; five days of it disables.
    failing_since        timestamptz,
    disabled_at          timestamptz,
    disabled_reason      text,
    deleted_at           timestamptz
);
CREATE INDEX webhook_endpoints_user ON webhook_endpoints (user_id)
    WHERE disabled_at IS NULL AND deleted_at IS NULL;

CREATE TABLE webhook_secrets (
    user_id    uuid        PRIMARY KEY REFERENCES users (id),
    secret     text        NOT NULL,
    created_at timestamptz NOT NULL
);

CREATE TABLE webhook_deliveries (
    id               uuid        PRIMARY KEY,
    -- The webhook-id header: `<job id>:<event>`, the same for every try.
    webhook_id       text        NOT NULL,
    -- Which target: 'endpoint:<id>' or 'job' (the job's own webhook_url).
    target           text        NOT NULL,
    endpoint_id      uuid        REFERENCES webhook_endpoints (id),
    user_id          uuid        NOT NULL REFERENCES users (id),
    job_id           uuid        REFERENCES jobs (id),
    event            text        NOT NULL,
    url              text        NOT NULL,
    -- The exact envelope, kept for every try and every replay.
    body             text        NOT NULL,
    state            text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    next_at          timestamptz NOT NULL,
    last_status      integer,
    last_error       text,
    lease_owner      text,
    lease_expires_at timestamptz,
    -- Bumped by every claim: a dispatcher's writes name it (fencing).
    claim_token      bigint      NOT NULL DEFAULT 0,
    replays          integer     NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL,
    delivered_at     timestamptz,
    UNIQUE (webhook_id, target)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_user ON webhook_deliveries (user_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_state ON webhook_deliveries (state, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, state, created_at);
