-- Uploads, paid jobs (charged in the same transaction that creates them),
-- and each job's timeline.

CREATE TABLE assets (
    id           BLOB    PRIMARY KEY CHECK (length(id) = 16),
    user_id      BLOB    NOT NULL REFERENCES users (id),
    sha256       TEXT    NOT NULL CHECK (length(sha256) = 64),
    content_type TEXT    NOT NULL CHECK (content_type IN ('image/png', 'image/jpeg', 'image/webp')),
    width        INTEGER NOT NULL CHECK (width > 0),
    height       INTEGER NOT NULL CHECK (height > 0),
    bytes        INTEGER NOT NULL CHECK (bytes > 0),
    -- Content-addressed: the same bytes are stored once.
    object_key   TEXT    NOT NULL,
    created_at   TEXT    NOT NULL,
    -- The same person uploading the same bytes gets the same asset back.
    UNIQUE (user_id, sha256)
) STRICT;

CREATE TABLE jobs (
    id               BLOB    PRIMARY KEY CHECK (length(id) = 16),
    user_id          BLOB    NOT NULL REFERENCES users (id),
    kind             TEXT    NOT NULL CHECK (kind IN ('image_edit', 'video')),
    status           TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'parked', 'succeeded', 'failed', 'cancelled')),
    -- The canonical request and its SHA-256 (rule 1).
    request          TEXT    NOT NULL,
    request_sha256   TEXT    NOT NULL CHECK (length(request_sha256) = 64),
    -- Set to NULL when the key expires, freeing it for reuse.
    idempotency_key  TEXT    CHECK (idempotency_key IS NULL OR length(idempotency_key) BETWEEN 1 AND 255),
    credits          INTEGER NOT NULL CHECK (credits > 0),
    -- Exact decimal as text (never REAL).
    estimated_usd    TEXT    NOT NULL,
    error            TEXT,
    created_at       TEXT    NOT NULL,
    completed_at     TEXT,
    CHECK ((status IN ('succeeded', 'failed', 'cancelled')) = (completed_at IS NOT NULL))
) STRICT;
CREATE UNIQUE INDEX jobs_idempotency ON jobs (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_user_created ON jobs (user_id, created_at DESC, id DESC);
CREATE INDEX jobs_status ON jobs (status);

CREATE TABLE job_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id     BLOB    NOT NULL REFERENCES jobs (id),
    kind       TEXT    NOT NULL,
    detail     TEXT    NOT NULL DEFAULT '{}',
    created_at TEXT    NOT NULL
) STRICT;
CREATE INDEX job_events_job ON job_events (job_id, id);
