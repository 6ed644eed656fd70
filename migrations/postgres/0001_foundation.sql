-- Accounts, API tokens and the append-only credit ledger (rule 2).

CREATE TABLE users (
    id            uuid        PRIMARY KEY,
    email         text        NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    password_hash text        NOT NULL,
    role          text        NOT NULL CHECK (role IN ('user', 'reviewer', 'admin')),
    disabled      boolean     NOT NULL DEFAULT false,
    -- Maintained only by the ledger trigger below.
    balance       bigint      NOT NULL DEFAULT 0 CHECK (balance >= 0),
    created_at    timestamptz NOT NULL
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

-- One row, ever: the first-run setup. Its primary key is what makes two
-- racing setups produce one admin.
CREATE TABLE instance_setup (
    id           integer     PRIMARY KEY CHECK (id = 1),
    admin_id     uuid        NOT NULL REFERENCES users (id),
    completed_at timestamptz NOT NULL
);

CREATE TABLE api_tokens (
    id           uuid        PRIMARY KEY,
    user_id      uuid        NOT NULL REFERENCES users (id),
    name         text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    -- SHA-256 of the token, hex. The token itself is never stored.
    token_hash   text        NOT NULL UNIQUE CHECK (length(token_hash) = 64),
    prefix       text        NOT NULL,
    created_at   timestamptz NOT NULL,
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_tokens_user ON api_tokens (user_id);

CREATE TABLE ledger (
    id         uuid        PRIMARY KEY,
    user_id    uuid        NOT NULL REFERENCES users (id),
    amount     bigint      NOT NULL CHECK (amount <> 0),
    kind       text        NOT NULL CHECK (kind IN ('grant', 'debit', 'refund', 'adjustment')),
    -- Unique, so the same refund inserted twice is one refund (rule 3).
    reference  text        NOT NULL UNIQUE CHECK (length(reference) BETWEEN 1 AND 200),
    actor_id   uuid        REFERENCES users (id),
    reason     text        CHECK (reason IS NULL OR length(reason) <= 500),
    created_at timestamptz NOT NULL,
    CHECK ((kind IN ('grant', 'refund') AND amount > 0)
        OR (kind = 'debit' AND amount < 0)
        OR kind = 'adjustment')
);
CREATE INDEX ledger_user_created ON ledger (user_id, created_at);

-- AFTER INSERT, so a row skipped by ON CONFLICT DO NOTHING changes nothing.
-- The conditional UPDATE takes the user's row lock: racing debits queue on
-- it and each sees the balance the previous one left.
CREATE FUNCTION ledger_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE users SET balance = balance + NEW.amount
     WHERE id = NEW.user_id AND balance + NEW.amount >= 0;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'insufficient_credits' USING ERRCODE = 'P0001';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER ledger_apply AFTER INSERT ON ledger
    FOR EACH ROW EXECUTE FUNCTION ledger_apply();

CREATE FUNCTION ledger_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'immutable_ledger' USING ERRCODE = 'P0001';
END;
$$;
CREATE TRIGGER ledger_no_update_or_delete BEFORE UPDATE OR DELETE ON ledger
    FOR EACH ROW EXECUTE FUNCTION ledger_immutable();
CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON ledger
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_immutable();
