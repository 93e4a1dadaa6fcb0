package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/postgres"
)

// PostgresStores returns a StoreFactory of PostgreSQL stores on table
// (which must exist: see postgres.CreateSchema), each row's keys under its
// namespace, judging leases by the demo's clock.
func PostgresStores(db postgres.DB, table string) StoreFactory {
	return func(_ context.Context, namespace string, now func() time.Time) (claimstore.Store, error) {
		return postgres.New(postgres.Config{DB: db, Table: table, KeyPrefix: namespace, Now: now})
	}
}

// PostgresLedger keeps experiment 7's ledger (as Options.PostgresLedger) in
// two PostgreSQL tables, <Tables>_journal and <Tables>_balances
// (CreatePostgresLedger makes them), beside its claims in
// Options.NewStore's stores, which must then be PostgreSQL stores on the
// same database (PostgresStores): the one-transaction row commits the
// entry, the balance and the claim's completion in one transaction.
type PostgresLedger struct {
	DB     postgres.DB
	Tables string
}

// CreatePostgresLedger creates l's tables if they do not exist.
func CreatePostgresLedger(ctx context.Context, l PostgresLedger) error {
	_, err := l.DB.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+l.Tables+`_journal (
		id bigserial PRIMARY KEY, ns text NOT NULL, entry_id text NOT NULL, account text NOT NULL, amount bigint NOT NULL);
	CREATE TABLE IF NOT EXISTS `+l.Tables+`_balances (
		ns text NOT NULL, account text NOT NULL, balance bigint NOT NULL, PRIMARY KEY (ns, account))`)
	if err != nil {
		return fmt.Errorf("demo: create ledger tables %s_*: %w", l.Tables, err)
	}
	return nil
}

// pgLedger is a ledger in PostgreSQL: a journal row per entry written (a
// naive append: two writes of one entry are two rows) and a row per
// account whose balance each write moves, all under ns.
type pgLedger struct {
	db     postgres.DB
	tables string
	ns     string
}

func (l *pgLedger) statements(e ledgerEntry) postgres.Writes {
	return func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+l.tables+`_journal (ns, entry_id, account, amount) VALUES ($1, $2, $3, $4)`,
			l.ns, e.EntryID, e.Account, e.Amount); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+l.tables+`_balances (ns, account, balance) VALUES ($1, $2, $3)
			ON CONFLICT (ns, account) DO UPDATE SET balance = `+l.tables+`_balances.balance + excluded.balance`, l.ns, e.Account, e.Amount)
		return err
	}
}

func (l *pgLedger) write(ctx context.Context, e ledgerEntry) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error { return l.statements(e)(ctx, tx) })
}

func (l *pgLedger) commit(ctx context.Context, store claimstore.Store, p claimstore.CompleteParams, e ledgerEntry) error {
	err := claimstore.CompleteTx(ctx, store, p, l.statements(e))
	if errors.Is(err, claimstore.ErrTxUnsupported) || errors.Is(err, claimstore.ErrInvalidParams) {
		return fmt.Errorf("experiment 7 on PostgreSQL needs PostgreSQL claim stores: %w", err)
	}
	return err
}

func (l *pgLedger) entries(ctx context.Context) (int, map[string]int, map[string]int64, error) {
	byID := map[string]int{}
	balances := map[string]int64{}
	n := 0
	rows, err := l.db.Query(ctx, `SELECT entry_id FROM `+l.tables+`_journal WHERE ns = $1`, l.ns)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read the journal: %w", err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, nil, nil, err
		}
		byID[id]++
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, nil, fmt.Errorf("read the journal: %w", err)
	}
	rows, err = l.db.Query(ctx, `SELECT account, balance FROM `+l.tables+`_balances WHERE ns = $1`, l.ns)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read the balances: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var acct string
		var b int64
		if err := rows.Scan(&acct, &b); err != nil {
			return 0, nil, nil, err
		}
		balances[acct] = b
	}
	return n, byID, balances, rows.Err()
}
