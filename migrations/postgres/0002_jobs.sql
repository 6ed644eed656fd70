-- Uploads, paid jobs (charged in the same transaction that creates them),
-- and each job's timeline.

CREATE TABLE assets (
    id           uuid        PRIMARY KEY,
    user_id      uuid        NOT NULL REFERENCES users (id),
    sha256       text        NOT NULL CHECK (length(sha256) = 64),
    content_type text        NOT NULL CHECK (content_type IN ('image/png', 'image/jpeg', 'image/webp')),
    width        integer     NOT NULL CHECK (width > 0),
    height       integer     NOT NULL CHECK (height > 0),
    bytes        bigint      NOT NULL CHECK (bytes > 0),
    -- Content-addressed: the same bytes are stored once.
    object_key   text        NOT NULL,
    created_at   timestamptz NOT NULL,
    -- The same person uploading the same bytes gets the same asset back.
    UNIQUE (user_id, sha256)
);

CREATE TABLE jobs (
    id               uuid          PRIMARY KEY,
    user_id          uuid          NOT NULL REFERENCES users (id),
    kind             text          NOT NULL CHECK (kind IN ('image_edit', 'video')),
    status           text          NOT NULL CHECK (status IN ('queued', 'running', 'parked', 'succeeded', 'failed', 'cancelled')),
    -- The canonical request and its SHA-256 (rule 1).
    request          jsonb         NOT NULL,
    request_sha256   text          NOT NULL CHECK (length(request_sha256) = 64),
    -- Set to NULL when the key expires, freeing it for reuse.
    idempotency_key  text          CHECK (idempotency_key IS NULL OR length(idempotency_key) BETWEEN 1 AND 255),
    credits          bigint        NOT NULL CHECK (credits > 0),
    estimated_usd    numeric(12,6) NOT NULL,
    error            jsonb,
    created_at       timestamptz   NOT NULL,
    completed_at     timestamptz,
    CHECK ((status IN ('succeeded', 'failed', 'cancelled')) = (completed_at IS NOT NULL))
);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_user_created ON jobs (user_id, created_at DESC, id DESC);
CREATE INDEX jobs_status ON jobs (status);

CREATE TABLE job_events (
    id         bigserial   PRIMARY KEY,
    job_id     uuid        NOT NULL REFERENCES jobs (id),
    kind       text        NOT NULL,
    detail     jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL
);
CREATE INDEX job_events_job ON job_events (job_id, id);
