package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/ledger"
)

// The claim stores `worker run`, the Lambda mode and `worker claims` can use (STORE).
const (
	storeDynamo   = "dynamo"   // a DynamoDB table, CLAIM_TABLE (the default)
	storePostgres = "postgres" // a PostgreSQL table on DATABASE_URL
)

// pgSettings select the PostgreSQL claim store.
type pgSettings struct {
	store, url    *string
	sweepInterval *time.Duration
	getenv        func(string) string
}

func definePostgres(s *settings) pgSettings {
	return pgSettings{
		store: s.String("store", "STORE", storeDynamo, "claim store: dynamo (CLAIM_TABLE in DynamoDB) or postgres (CLAIM_TABLE on DATABASE_URL)"),
		// No environment default in the flag: a password in the URL must
		// not show in -h.
		url:           s.fs.String("database-url", "", "PostgreSQL connection URL, for STORE=postgres (env DATABASE_URL)"),
		sweepInterval: s.Duration("claim-sweep-interval", "CLAIM_SWEEP_INTERVAL", time.Minute, "how often a PostgreSQL store deletes claims past their expiry (0: never; run \"worker claims sweep\" instead)"),
		getenv:        s.getenv,
	}
}

// postgres reports whether STORE selects PostgreSQL, or a usage error for
// an unknown store.
func (p pgSettings) postgres() (bool, error) {
	switch *p.store {
	case storeDynamo, "":
		return false, nil
	case storePostgres:
		if *p.sweepInterval < 0 {
			return true, usagef("CLAIM_SWEEP_INTERVAL (-claim-sweep-interval) %s: must not be negative", *p.sweepInterval)
		}
		return true, nil
	default:
		return false, usagef("STORE (-store) %q: want %s or %s", *p.store, storeDynamo, storePostgres)
	}
}

// databaseURL is -database-url, else DATABASE_URL.
func (p pgSettings) databaseURL() (string, error) {
	u := *p.url
	if u == "" && p.getenv != nil {
		u = p.getenv("DATABASE_URL")
	}
	if u == "" {
		return "", usagef("DATABASE_URL (-database-url) is required for STORE=postgres")
	}
	return u, nil
}

// openPool connects to the database and checks that it answers.
func (p pgSettings) openPool(ctx context.Context) (*pgxpool.Pool, error) {
	u, err := p.databaseURL()
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		// pgx's parse errors can quote the URL, password and all: say only what failed.
		return nil, usagef("DATABASE_URL (-database-url): not a PostgreSQL connection URL")
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect to %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	return pool, nil
}

// postgresStore opens the pool and the claim store on table ("" for the default).
func (p pgSettings) postgresStore(ctx context.Context, table, prefix string) (*postgres.Store, *pgxpool.Pool, error) {
	pool, err := p.openPool(ctx)
	if err != nil {
		return nil, nil, err
	}
	if table == "" {
		table = postgres.DefaultTable
	}
	s, err := postgres.New(postgres.Config{DB: pool, Table: table, KeyPrefix: prefix})
	if err != nil {
		pool.Close()
		return nil, nil, usagef("CLAIM_TABLE: %v", err)
	}
	return s, pool, nil
}

// pgApp is what an app on STORE=postgres holds besides the store.
type pgApp struct {
	pg   *postgres.Store // the claim store, for its sweeper
	pool *pgxpool.Pool   // closed when the app ends
}

// sweep runs the store's sweeper until ctx is done, if it has one.
func (a *app) sweep(ctx context.Context, interval time.Duration) {
	if a.pg == nil || interval == 0 {
		return
	}
	a.pg.SweepEvery(ctx, interval, postgres.SweepParams{}, a.log)
}

// closePool closes the PostgreSQL pool, if there is one.
func (a *app) closePool() {
	if a.pool != nil {
		a.pool.Close()
	}
}

// setStore sets the app's claim store, and its pool and sweeper when it is PostgreSQL's.
func (a *app) setStore(s claimstore.Store) {
	a.store = s
	if pg, ok := s.(*postgres.Store); ok {
		a.pg = pg
		a.pool, _ = pg.DB().(*pgxpool.Pool)
	}
}

// cmdClaimsSweep is `worker claims sweep`: delete the claims past their
// expiry from a PostgreSQL claim table, in batches, and print how many.
func cmdClaimsSweep(ctx context.Context, args []string, io stdio) error {
	s := newSettings("claims sweep", io)
	table := s.String("claim-table", "CLAIM_TABLE", "", "PostgreSQL claim table (default: "+postgres.DefaultTable+")")
	batch := s.fs.Int("batch", postgres.DefaultSweepBatch, "rows per DELETE")
	maxRows := s.fs.Int64("max-rows", 0, "stop after this many rows (0: until none past its expiry is left)")
	pg := definePostgres(s)
	if err := s.Parse(args); err != nil {
		return err
	}
	if *pg.store != storePostgres {
		return usagef("claims sweep: for STORE=postgres only; DynamoDB's TTL deletes expired claims by itself")
	}
	if *batch < 1 || *maxRows < 0 {
		return usagef("claims sweep: -batch must be at least 1 and -max-rows not negative")
	}
	store, pool, err := pg.postgresStore(ctx, *table, "")
	if err != nil {
		return err
	}
	defer pool.Close()
	start := time.Now()
	n, err := store.Sweep(ctx, postgres.SweepParams{Batch: *batch, MaxRows: *maxRows})
	fmt.Fprintf(io.stdout, "deleted %d expired claims in %s\n", n, time.Since(start).Round(time.Millisecond))
	return err
}

// setupPostgres creates the claim table, and the ledger's tables if
// ledgerTables is set, on DATABASE_URL: `worker setup -postgres`.
func setupPostgres(ctx context.Context, s *settings, table, ledgerTables string, report io.Writer) error {
	pg := pgSettings{url: new(string), getenv: s.getenv}
	pool, err := pg.openPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	var existed bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&existed); err != nil {
		return fmt.Errorf("setup: claim table %s: %w", table, err)
	}
	if err := postgres.CreateSchema(ctx, pool, table); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if existed {
		fmt.Fprintf(report, "setup: claim table %s exists (PostgreSQL)\n", table)
	} else {
		fmt.Fprintf(report, "setup: created claim table %s (PostgreSQL)\n", table)
	}
	if ledgerTables != "" {
		if err := ledger.CreateSQLTables(ctx, pool, ledgerTables); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	return nil
}
