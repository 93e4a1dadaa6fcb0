// Package postgres is the claimstore.Store on a PostgreSQL table, with pgx.
//
// The table (schema/v1.sql, created by CreateSchema or `worker setup
// -postgres`) has one row per key, the key its primary key: the seed's
// INSERT with a unique constraint, where the database decides who won.
// Every operation is one statement and one round trip on the happy path
// (batched behind the server's bounds on it, Config.Timeout), and none
// reads before it writes:
//
//   - Acquire is an INSERT ... ON CONFLICT DO UPDATE whose WHERE is the
//     takeover rule (the row expired, released, or past its lease, with a
//     compatible fingerprint). A written row is the caller's; otherwise the
//     same statement returns the row in the way, and
//     claimstore.Claim.Decide says what it means: the caller's own applied
//     write, key reuse, a duplicate or a live holder.
//   - Renew, Complete and Release are UPDATEs conditioned on "acq = mine
//     AND status = IN_PROGRESS"; one that wrote nothing reads the row's
//     status under the caller's acq in a second statement (a fresh
//     snapshot), to recognize its own applied write.
//   - CompleteTx is Complete and the handler's own statements (Writes) in
//     one transaction, the completion first.
//
// Times come from the database's clock (clock_timestamp()), not the
// workers': a lease's end is written as now plus the lease's duration, and
// every comparison reads the same clock, so the workers' clock skew takes
// no part in the protocol on this store. Config.Now replaces that clock in
// tests.
//
// PostgreSQL has no TTL: a row past expires_at counts as absent, and Sweep
// (run by the worker on an interval and by `worker claims sweep`) deletes
// such rows in bounded batches through the expires_at index.
package postgres
