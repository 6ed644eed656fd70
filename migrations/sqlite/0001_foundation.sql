-- Accounts, API tokens and the append-only credit ledger (rule 2).
-- Ids are 16-byte BLOBs (sqlx's native UUID encoding); times are RFC 3339 TEXT.

CREATE TABLE users (
    id            BLOB    PRIMARY KEY CHECK (length(id) = 16),
    email         TEXT    NOT NULL COLLATE NOCASE UNIQUE CHECK (length(email) BETWEEN 3 AND 254),
    password_hash TEXT    NOT NULL,
    role          TEXT    NOT NULL CHECK (role IN ('user', 'reviewer', 'admin')),
    disabled      INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
    -- Maintained only by the ledger triggers below.
    balance       INTEGER NOT NULL DEFAULT 0 CHECK (balance >= 0),
    created_at    TEXT    NOT NULL
) STRICT;

-- One row, ever: the first-run setup. Its primary key is what makes two
-- racing setups produce one admin.
CREATE TABLE instance_setup (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    admin_id     BLOB    NOT NULL REFERENCES users (id),
    completed_at TEXT    NOT NULL
) STRICT;

CREATE TABLE api_tokens (
    id           BLOB PRIMARY KEY CHECK (length(id) = 16),
    user_id      BLOB NOT NULL REFERENCES users (id),
    name         TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    -- SHA-256 of the token, hex. The token itself is never stored.
    token_hash   TEXT NOT NULL UNIQUE CHECK (length(token_hash) = 64),
    -- The first characters of the token, to recognise it in a list.
    prefix       TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    last_used_at TEXT,
    revoked_at   TEXT
) STRICT;
CREATE INDEX api_tokens_user ON api_tokens (user_id);

CREATE TABLE ledger (
    id         BLOB    PRIMARY KEY CHECK (length(id) = 16),
    user_id    BLOB    NOT NULL REFERENCES users (id),
    amount     INTEGER NOT NULL CHECK (amount <> 0),
    kind       TEXT    NOT NULL CHECK (kind IN ('grant', 'debit', 'refund', 'adjustment')),
    -- What this entry is for, e.g. grant:<uuid>, debit:job:<id>, refund:job:<id>.
    -- Unique, so the same refund inserted twice is one refund (rule 3).
    reference  TEXT    NOT NULL UNIQUE CHECK (length(reference) BETWEEN 1 AND 200),
    actor_id   BLOB    REFERENCES users (id),
    reason     TEXT    CHECK (reason IS NULL OR length(reason) <= 500),
    created_at TEXT    NOT NULL,
    CHECK ((kind IN ('grant', 'refund') AND amount > 0)
        OR (kind = 'debit' AND amount < 0)
        OR kind = 'adjustment')
) STRICT;
CREATE INDEX ledger_user_created ON ledger (user_id, created_at);

-- AFTER INSERT, so a row skipped by ON CONFLICT DO NOTHING changes nothing.
CREATE TRIGGER ledger_apply AFTER INSERT ON ledger
BEGIN
    SELECT RAISE(ABORT, 'insufficient_credits')
    WHERE (SELECT balance FROM users WHERE id = NEW.user_id) + NEW.amount < 0;
    UPDATE users SET balance = balance + NEW.amount WHERE id = NEW.user_id;
END;

CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger
BEGIN
    SELECT RAISE(ABORT, 'immutable_ledger');
END;

CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
BEGIN
    SELECT RAISE(ABORT, 'immutable_ledger');
END;
