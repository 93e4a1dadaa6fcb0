package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimfirst/claimfirst/claimstore"
)

var (
	_ claimstore.Store       = (*Store)(nil)
	_ claimstore.Admin       = (*Store)(nil)
	_ claimstore.TxCompleter = (*Store)(nil)
)

// DefaultTable is the claim table's name in schema/v1.sql.
const DefaultTable = "claimfirst_claims"

// DB is the part of *pgxpool.Pool the store uses (a *pgx.Conn and a pgx.Tx
// have it too).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Config configures a Store.
type Config struct {
	// DB is the connection pool, usually from pgxpool.New. Required.
	DB DB
	// Table is the claim table's name: lower-case letters, digits and
	// underscores (put it in another schema with the connection's
	// search_path). Defaults to "claimfirst_claims".
	Table string
	// KeyPrefix is prepended to every key so that several consumers can share
	// a table; it counts toward claimstore.MaxKeyBytes. Defaults to "".
	KeyPrefix string
	// Now, when set, is the store's clock for every comparison and every
	// time written, instead of the database's (tests move it). Defaults to
	// nil: the database's clock_timestamp(), so that the workers' clocks
	// do not take part in the protocol.
	Now func() time.Time
	// Timeout bounds the store's work on the server, not only in the
	// caller: each statement (statement_timeout, lock_timeout) and, in
	// CompleteTx, each pause of its transaction (the session ends after
	// idle_in_transaction_session_timeout), Writes' statements included.
	// A client the network cut off mid-transaction otherwise leaves the
	// claim's row locked, and every later acquire and completion of the
	// key waiting, until the server's TCP keepalive notices (two hours by
	// default). Set it to the callers' own bound on a store call
	// (once.Options.StoreTimeout). Defaults to 10s.
	Timeout time.Duration
	// Local is the caller's clock, used only to turn the caller's instants
	// (a lease's end) into durations from now and the database's instants
	// back into the caller's; Now replaces it when set. Defaults to time.Now.
	Local func() time.Time
}

// DefaultTimeout is Config.Timeout's default.
const DefaultTimeout = 10 * time.Second

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Local == nil {
		c.Local = time.Now
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Now != nil {
		c.Local = c.Now
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.DB == nil {
		errs = append(errs, errors.New("DB is required"))
	}
	if !tableName.MatchString(c.Table) {
		errs = append(errs, fmt.Errorf("Table %q: want lower-case letters, digits and underscores, at most 63", c.Table))
	}
	if c.Timeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("Timeout %v: want at least 1ms", c.Timeout))
	}
	return errors.Join(errs...)
}

// Store is a claimstore.Store on a PostgreSQL table, safe for concurrent use.
type Store struct {
	cfg     Config
	sql     statements
	timeout string // Config.Timeout as a server setting
}

// statements are the store's SQL, with the table's name in them, built once.
type statements struct {
	acquire, renew, complete, release, get, sweep string
	holderStatus, bounds                          string
	forceRelease, forceComplete, forget           string
}

// The columns of a row, in the order every statement returns them.
const columns = "key, status, token, acq, lease_until, expires_at, first_at, fingerprint, owner, attempts, result, last_error"

// now is the statement's instant: the caller's ($n) or the database's.
// lease and expiry turn a duration in microseconds after it into the
// stored precision: a lease's end truncated to the millisecond, an expiry
// rounded up to the second (claimstore.LeaseMillis, claimstore.ExpirySeconds).
const (
	nowSQL    = "coalesce(%s::timestamptz, clock_timestamp())"
	leaseSQL  = "date_trunc('milliseconds', %s + %s::bigint * interval '1 microsecond')"
	expirySQL = "to_timestamp(ceil(extract(epoch FROM %s + %s::bigint * interval '1 microsecond')))"
)

func newStatements(table string) statements {
	t := table
	now := fmt.Sprintf(nowSQL, "$5")
	var s statements
	// Acquire: insert the new row; on conflict, take the row over where
	// claimstore.Claim.Decide would (expired, or fingerprint compatible and
	// released or past its lease), never over the caller's own acquisition
	// in progress (a retry whose first try landed); the caller's own row
	// released, or completed and expired, is taken over like anyone's.
	// excluded.first_at is now truncated to the millisecond: lease_until
	// and expires_at are millisecond-aligned, so comparing with it is
	// comparing with now. When nothing was written, the second branch
	// returns the row in the way as of the statement's snapshot; a row
	// inserted by a transaction that committed after the snapshot is not in
	// it, and the caller runs the statement again.
	s.acquire = `WITH n AS (SELECT ` + now + ` AS t),
v AS (SELECT n.t,
	` + fmt.Sprintf(leaseSQL, "n.t", "$6") + ` AS lease,
	` + fmt.Sprintf(expirySQL, "n.t", "$7") + ` AS exp FROM n),
w AS (
	INSERT INTO ` + t + ` AS c (` + columns + `)
	SELECT $1, 'IN_PROGRESS', 1, $2, v.lease, v.exp, date_trunc('milliseconds', v.t), $4, $3, 1, '', '' FROM v
	ON CONFLICT (key) DO UPDATE SET
		status = 'IN_PROGRESS', token = c.token + 1, acq = excluded.acq,
		lease_until = excluded.lease_until, expires_at = excluded.expires_at, owner = excluded.owner, result = '',
		attempts = CASE WHEN c.expires_at > excluded.first_at THEN c.attempts + 1 ELSE 1 END,
		first_at = CASE WHEN c.expires_at > excluded.first_at OR c.status <> 'COMPLETED' THEN c.first_at ELSE excluded.first_at END,
		fingerprint = CASE WHEN c.expires_at > excluded.first_at AND excluded.fingerprint = '' THEN c.fingerprint ELSE excluded.fingerprint END,
		last_error = CASE WHEN c.expires_at > excluded.first_at THEN c.last_error ELSE '' END
	WHERE NOT (c.acq = excluded.acq AND c.status = 'IN_PROGRESS') AND (c.expires_at <= excluded.first_at OR (
		(c.fingerprint = '' OR excluded.fingerprint = '' OR c.fingerprint = excluded.fingerprint) AND
		(c.status = 'RELEASED' OR (c.status = 'IN_PROGRESS' AND c.lease_until <= excluded.first_at))))
	RETURNING ` + prefixed("c.", columns) + `
)
SELECT true, w.*, (SELECT t FROM n) FROM w
UNION ALL
SELECT false, ` + prefixed("c.", columns) + `, (SELECT t FROM n) FROM ` + t + ` c
	WHERE c.key = $1 AND NOT EXISTS (SELECT 1 FROM w)`

	// The holder's writes: conditioned on its acquisition and the claim in
	// progress. A write that changed nothing is followed by holderStatus,
	// the row's status if it carries the holder's acquisition, to recognize
	// its own earlier write. That read is a statement of its own: the
	// write's statement reads a snapshot taken before it waited for the
	// row's lock, which misses the first try if that committed meanwhile,
	// while a new statement in READ COMMITTED reads the newest row.
	holder := func(set string) string {
		return `WITH n AS (SELECT ` + fmt.Sprintf(nowSQL, "$3") + ` AS t),
u AS (UPDATE ` + t + ` SET ` + set + ` FROM n WHERE key = $1 AND acq = $2 AND status = 'IN_PROGRESS' RETURNING 1)
SELECT EXISTS (SELECT 1 FROM u)`
	}
	s.holderStatus = `SELECT coalesce((SELECT status FROM ` + t + ` WHERE key = $1 AND acq = $2), '')`
	s.renew = holder(`lease_until = ` + fmt.Sprintf(leaseSQL, "n.t", "$4") +
		`, expires_at = ` + fmt.Sprintf(expirySQL, "n.t", "greatest($4::bigint, $5::bigint)") +
		`, last_error = CASE WHEN $6 = '' THEN last_error ELSE $6 END`)
	s.complete = holder(`status = 'COMPLETED', result = $4, expires_at = ` + fmt.Sprintf(expirySQL, "n.t", "$5"))
	s.release = holder(`status = 'RELEASED', last_error = CASE WHEN $4 = '' THEN last_error ELSE $4 END`)

	// The server's bounds on the statement that follows in the same
	// transaction: the implicit one of a batch, or CompleteTx's.
	s.bounds = `SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true),
	set_config('idle_in_transaction_session_timeout', $1, true)`

	s.get = `WITH n AS (SELECT ` + fmt.Sprintf(nowSQL, "$2") + ` AS t)
SELECT true, ` + columns + `, n.t FROM ` + t + `, n WHERE key = $1`

	// Admin writes, conditioned on the row as read (status, token, acq).
	asRead := ` WHERE key = $1 AND status = $2 AND token = $3 AND acq = $4`
	s.forceRelease = `UPDATE ` + t + ` SET status = 'RELEASED', acq = $5` + asRead
	s.forceComplete = `UPDATE ` + t + ` SET status = 'COMPLETED', result = $5, acq = $6, expires_at = greatest(expires_at, ` +
		fmt.Sprintf(expirySQL, fmt.Sprintf(nowSQL, "$7"), "$8") + `)` + asRead
	s.forget = `DELETE FROM ` + t + asRead

	// Sweep: a batch of rows past their expiry, oldest first through the
	// expires_at index, skipping rows a takeover holds; the outer condition
	// is checked again on a row that changed meanwhile.
	s.sweep = `WITH n AS (SELECT ` + fmt.Sprintf(nowSQL, "$2") + ` AS t)
DELETE FROM ` + t + ` USING n WHERE key IN (
	SELECT key FROM ` + t + ` WHERE expires_at <= (SELECT t FROM n) ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
) AND expires_at <= n.t`
	return s
}

// prefixed qualifies each of the comma-separated names with p.
func prefixed(p, names string) string {
	parts := strings.Split(names, ", ")
	for i := range parts {
		parts[i] = p + parts[i]
	}
	return strings.Join(parts, ", ")
}

// New returns a Store, or an error naming each bad field of cfg. The table
// must exist: CreateSchema creates it.
func New(cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return &Store{cfg: cfg, sql: newStatements(cfg.Table), timeout: fmt.Sprintf("%dms", cfg.Timeout.Milliseconds())}, nil
}

// batcher runs statements in one round trip: a pool, a connection or a
// transaction.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// bounded queues the server's bounds (Config.Timeout) before sql in one
// batch on q, which runs them in one round trip and one transaction (q's,
// or the batch's own), and returns the batch's results positioned at sql's.
func (s *Store) bounded(ctx context.Context, q batcher, sql string, args ...any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.Queue(s.sql.bounds, s.timeout)
	b.Queue(sql, args...)
	br := q.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

// queryRow is q.QueryRow(ctx, sql, args...) under the server's bounds.
func (s *Store) queryRow(ctx context.Context, q batcher, sql string, args ...any) pgx.Row {
	br, err := s.bounded(ctx, q, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return batchRow{br: br, row: br.QueryRow()}
}

// exec is q.Exec(ctx, sql, args...) under the server's bounds.
func (s *Store) exec(ctx context.Context, q batcher, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := s.bounded(ctx, q, sql, args...)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// batchRow is a batch's row; Scan closes the batch.
type batchRow struct {
	br  pgx.BatchResults
	row pgx.Row
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// errRow is a row whose statement failed.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// clock returns the statement's $now (nil: the database's clock) and the
// caller's instant that durations are measured from.
func (s *Store) clock() (now any, local time.Time) {
	local = s.cfg.Local()
	if s.cfg.Now != nil {
		return local, local
	}
	return nil, local
}

// micros is t's distance from local in microseconds, the unit the
// statements add to their now.
func micros(t, local time.Time) int64 { return t.Sub(local).Microseconds() }

// row is a claim as a statement returns it, with the statement's now.
type row struct {
	written bool
	c       claimstore.Claim
	now     time.Time
}

func (s *Store) scan(r pgx.Row, key string) (row, error) {
	var (
		x      row
		stored string
		status string
	)
	err := r.Scan(&x.written, &stored, &status, &x.c.Token, &x.c.Acq, &x.c.LeaseUntil, &x.c.ExpiresAt, &x.c.FirstAt,
		&x.c.Fingerprint, &x.c.Owner, &x.c.Attempts, &x.c.Result, &x.c.LastError, &x.now)
	if err != nil {
		return row{}, err
	}
	x.c.Key = key
	x.c.Status = claimstore.Status(status)
	return x, nil
}

// local returns c with its instants moved from the database's clock onto
// the caller's: the statement ran at now by the database and at the
// earliest at local by the caller, so an instant comes out no later than
// it is by the database (a lease looks shorter, never longer).
func (s *Store) local(c claimstore.Claim, now, local time.Time) claimstore.Claim {
	if s.cfg.Now != nil {
		return c
	}
	d := local.Sub(now)
	c.LeaseUntil = c.LeaseUntil.Add(d)
	c.ExpiresAt = c.ExpiresAt.Add(d)
	c.FirstAt = c.FirstAt.Add(d)
	return c
}

// maxAttempts bounds the statements of one Acquire: a second one runs only
// when the row changed between the statement's snapshot and its write.
const maxAttempts = 4

// Acquire implements claimstore.Store: one INSERT ... ON CONFLICT DO UPDATE
// that inserts, takes over, or returns the row in the way.
func (s *Store) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	now, local := s.clock()
	if err := p.Check(s.cfg.KeyPrefix, local); err != nil {
		return claimstore.Acquisition{}, err
	}
	if err := checkText(p.Key); err != nil {
		return claimstore.Acquisition{}, err
	}
	if p.Acq == "" {
		p.Acq = claimstore.NewAcq()
	}
	var last *row
	for range maxAttempts {
		x, err := s.scan(s.queryRow(ctx, s.cfg.DB, s.sql.acquire, claimstore.StoredKey(s.cfg.KeyPrefix, p.Key), p.Acq, p.Owner, p.Fingerprint,
			now, micros(p.LeaseUntil, local), micros(p.ExpiresAt, local)), p.Key)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // a row committed after the snapshot: look again
		case err != nil:
			return claimstore.Acquisition{}, fmt.Errorf("acquire %q: %w", p.Key, err)
		case x.written:
			return claimstore.Acquisition{Outcome: claimstore.Acquired, Claim: s.local(x.c, x.now, local)}, nil
		}
		outcome, take := x.c.Decide(p, x.now)
		if !take {
			return claimstore.Acquisition{Outcome: outcome, Claim: s.local(x.c, x.now, local)}, nil
		}
		// The snapshot showed a row the write found changed (another
		// acquirer took it over first): look again.
		last = &x
	}
	if last == nil {
		return claimstore.Acquisition{}, fmt.Errorf("acquire %q: the row kept changing under %d statements", p.Key, maxAttempts)
	}
	// Still contended after every try: someone else keeps winning, which is
	// what held elsewhere means to the caller.
	return claimstore.Acquisition{Outcome: claimstore.HeldElsewhere, Claim: s.local(last.c, last.now, local)}, nil
}

// Renew implements claimstore.Store.
func (s *Store) Renew(ctx context.Context, p claimstore.RenewParams) error {
	if err := p.Check(s.cfg.KeyPrefix); err != nil {
		return err
	}
	now, local := s.clock()
	return s.holderWrite(ctx, "renew", s.sql.renew, claimstore.StatusInProgress, p.Holder, now,
		micros(p.LeaseUntil, local), micros(p.ExpiresAt, local), claimstore.TruncateLastError(p.LastError))
}

// Complete implements claimstore.Store.
func (s *Store) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	if err := p.Check(s.cfg.KeyPrefix); err != nil {
		return err
	}
	now, local := s.clock()
	return s.holderWrite(ctx, "complete", s.sql.complete, claimstore.StatusCompleted, p.Holder, now,
		p.Result, micros(p.ExpiresAt, local))
}

// Release implements claimstore.Store.
func (s *Store) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	if err := p.Check(s.cfg.KeyPrefix); err != nil {
		return err
	}
	now, _ := s.clock()
	return s.holderWrite(ctx, "release", s.sql.release, claimstore.StatusReleased, p.Holder, now,
		claimstore.TruncateLastError(p.LastError))
}

// holderWrite runs one of the holder's writes. A write that changed
// nothing but finds the holder's acquisition already in target is its own
// earlier try, applied: success.
func (s *Store) holderWrite(ctx context.Context, op, sql string, target claimstore.Status, h claimstore.Holder, now any, args ...any) error {
	written, err := s.holderWriteOn(ctx, s.cfg.DB, op, sql, target, h, now, args...)
	if err == nil && !written {
		return nil // the first try, applied
	}
	return err
}

// querier is the part of a pool and of a transaction a holder's write uses.
type querier interface {
	batcher
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// holderWriteOn runs one of the holder's writes through q (the pool or a
// transaction) and reports whether this statement wrote; when it did not,
// it reads the row afresh and returns nil if it is the holder's own in
// target (an earlier try, applied), ErrLeaseLost otherwise.
func (s *Store) holderWriteOn(ctx context.Context, q querier, op, sql string, target claimstore.Status, h claimstore.Holder, now any, args ...any) (written bool, err error) {
	key := claimstore.StoredKey(s.cfg.KeyPrefix, h.Key)
	all := append([]any{key, h.Acq, now}, args...)
	if err := s.queryRow(ctx, q, sql, all...).Scan(&written); err != nil {
		return false, fmt.Errorf("%s %q token %d: %w", op, h.Key, h.Token, err)
	}
	if written {
		return true, nil
	}
	var status string
	if err := q.QueryRow(ctx, s.sql.holderStatus, key, h.Acq).Scan(&status); err != nil {
		return false, fmt.Errorf("%s %q token %d: read after an unapplied write: %w", op, h.Key, h.Token, err)
	}
	if claimstore.Status(status) == target {
		return false, nil
	}
	return false, fmt.Errorf("%s %q token %d: %w", op, h.Key, h.Token, claimstore.ErrLeaseLost)
}

// Get implements claimstore.Store.
func (s *Store) Get(ctx context.Context, key string) (claimstore.Claim, error) {
	if err := claimstore.CheckKey(s.cfg.KeyPrefix, key); err != nil {
		return claimstore.Claim{}, err
	}
	if err := checkText(key); err != nil {
		return claimstore.Claim{}, err
	}
	now, local := s.clock()
	x, err := s.scan(s.queryRow(ctx, s.cfg.DB, s.sql.get, claimstore.StoredKey(s.cfg.KeyPrefix, key), now), key)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return claimstore.Claim{}, fmt.Errorf("get %q: %w", key, claimstore.ErrNotFound)
	case err != nil:
		return claimstore.Claim{}, fmt.Errorf("get %q: %w", key, err)
	case !x.c.Live(x.now):
		return claimstore.Claim{}, fmt.Errorf("get %q: %w", key, claimstore.ErrNotFound)
	}
	return s.local(x.c, x.now, local), nil
}

// DB returns the store's connection pool, Config.DB.
func (s *Store) DB() DB { return s.cfg.DB }

// checkText rejects a key PostgreSQL's text type cannot hold (a NUL byte),
// which would otherwise fail every statement as a backend error, retried
// forever.
func checkText(key string) error {
	if strings.IndexByte(key, 0) >= 0 {
		return fmt.Errorf("%w: contains a NUL byte, which PostgreSQL text cannot hold", claimstore.ErrInvalidKey)
	}
	return nil
}
