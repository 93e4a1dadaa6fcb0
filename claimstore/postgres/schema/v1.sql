-- claimfirst claim table, schema version 1.
-- One row per idempotency key; docs/protocol.md describes each column.
-- Idempotent: `worker setup -postgres` runs it on every setup. To use another
-- table name, the store substitutes it for claimfirst_claims throughout; a
-- name over 48 characters gets an index name cut to 63 bytes with a hash
-- of the table's name in it (postgres.CreateSchema), never a truncated one.
CREATE TABLE IF NOT EXISTS claimfirst_claims (
    key          text        PRIMARY KEY,            -- the idempotency key, with the store's prefix
    status       text        NOT NULL CHECK (status IN ('IN_PROGRESS', 'COMPLETED', 'RELEASED')),
    token        bigint      NOT NULL CHECK (token > 0), -- fencing token: 1, then +1 per takeover
    acq          text        NOT NULL,               -- the acquisition's random id; holder writes are conditioned on it
    lease_until  timestamptz NOT NULL,               -- end of the holder's lease (millisecond precision)
    expires_at   timestamptz NOT NULL,               -- the row counts as absent from then on (second precision)
    first_at     timestamptz NOT NULL,               -- the key's first acquisition, kept by takeovers
    fingerprint  text        NOT NULL DEFAULT '',    -- what the payload was; '' if none was given
    owner        text        NOT NULL DEFAULT '',    -- the worker instance that last acquired the claim
    attempts     bigint      NOT NULL,               -- acquisitions so far
    result       text        NOT NULL DEFAULT '',    -- the outcome of a completed claim
    last_error   text        NOT NULL DEFAULT ''     -- why the last holder released the claim
);

-- PostgreSQL has no TTL: the sweeper deletes rows past expires_at in batches,
-- oldest first, through this index.
CREATE INDEX IF NOT EXISTS claimfirst_claims_expires_at_idx ON claimfirst_claims (expires_at);

COMMENT ON TABLE claimfirst_claims IS 'claimfirst claims, schema version 1';
