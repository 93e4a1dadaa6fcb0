package ledger

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/worker"
)

// SQLHandler is the worker.Handler that applies ledger entries to
// PostgreSQL tables, committed in one transaction with the claim's
// completion: the worker's claim store must be a *postgres.Store on the
// same database. Exactly once comes from the claim, as for Handler; the
// entry's primary key guards an entry applied under another claim.
//
// Two tables, named from Tables (CreateSQLTables creates them):
//
//	<Tables>_entries   entry_id (primary key), account, amount, token
//	<Tables>_accounts  account (primary key), balance, entries
type SQLHandler struct {
	// Tables is the tables' name prefix: lower-case letters, digits and
	// underscores. Required.
	Tables string
}

var _ worker.Handler = SQLHandler{}

var sqlName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,50}$`)

func (h SQLHandler) check() error {
	if !sqlName.MatchString(h.Tables) {
		return fmt.Errorf("ledger: SQLHandler.Tables %q: want lower-case letters, digits and underscores", h.Tables)
	}
	return nil
}

// Handle implements worker.Handler: it commits the entry's statements with
// the claim's completion and returns ResultApplied; it writes nothing itself.
func (h SQLHandler) Handle(_ context.Context, m *worker.Message) (string, error) {
	e, ok := m.Payload.(Entry)
	if !ok {
		return "", worker.Permanentf("ledger: payload is %T, want ledger.Entry (use ledger.Decoder)", m.Payload)
	}
	if err := h.check(); err != nil {
		return "", err
	}
	m.Commit(worker.Tx{Writes: h.Writes(e, m.Token), Rejected: rejectedSQL(e)})
	return ResultApplied, nil
}

// Writes are e's statements: the entry's INSERT, which finds an entry
// already applied and returns it in a *claimstore.WriteConditionError, and
// the account's balance moved by the amount.
func (h SQLHandler) Writes(e Entry, token int64) postgres.Writes {
	entries, accounts := h.Tables+"_entries", h.Tables+"_accounts"
	return func(ctx context.Context, tx pgx.Tx) error {
		var inserted bool
		err := tx.QueryRow(ctx, `INSERT INTO `+entries+` (entry_id, account, amount, token) VALUES ($1, $2, $3, $4)
			ON CONFLICT (entry_id) DO NOTHING RETURNING true`, e.EntryID, e.Account, e.Amount, token).Scan(&inserted)
		if errors.Is(err, pgx.ErrNoRows) {
			old := Entry{EntryID: e.EntryID}
			if err := tx.QueryRow(ctx, `SELECT account, amount FROM `+entries+` WHERE entry_id = $1`, e.EntryID).Scan(&old.Account, &old.Amount); err != nil {
				return fmt.Errorf("ledger: read the entry in the way: %w", err)
			}
			return &claimstore.WriteConditionError{Index: 0, Item: old, Err: fmt.Errorf("ledger: entry %q exists", e.EntryID)}
		}
		if err != nil {
			return fmt.Errorf("ledger: insert entry: %w", err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+accounts+` (account, balance, entries) VALUES ($1, $2, 1)
			ON CONFLICT (account) DO UPDATE SET balance = `+accounts+`.balance + excluded.balance, entries = `+accounts+`.entries + 1`,
			e.Account, e.Amount)
		if err != nil {
			return fmt.Errorf("ledger: move balance: %w", err)
		}
		return nil
	}
}

// rejectedSQL decides what an existing entry means, as Handler's rejected.
func rejectedSQL(e Entry) func(*claimstore.WriteConditionError) (string, error) {
	return func(wce *claimstore.WriteConditionError) (string, error) {
		old, ok := wce.Item.(Entry)
		switch {
		case !ok:
			return "", wce
		case old.Account == e.Account && old.Amount == e.Amount:
			return ResultAlreadyApplied, nil
		default:
			return "", &worker.PermanentError{Code: worker.CodeKeyReused, Reason: fmt.Sprintf("entry_id %q already applied with another account or amount", e.EntryID)}
		}
	}
}

// CreateSQLTables creates the ledger's two tables with the prefix tables if
// they do not exist: for development and tests.
func CreateSQLTables(ctx context.Context, db postgres.DB, tables string) error {
	if err := (SQLHandler{Tables: tables}).check(); err != nil {
		return err
	}
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+tables+`_entries (
		entry_id text PRIMARY KEY, account text NOT NULL, amount bigint NOT NULL, token bigint NOT NULL);
	CREATE TABLE IF NOT EXISTS `+tables+`_accounts (
		account text PRIMARY KEY, balance bigint NOT NULL, entries bigint NOT NULL)`)
	if err != nil {
		return fmt.Errorf("ledger: create tables %s_*: %w", tables, err)
	}
	return nil
}

// ReadSQLAccount reads an account's row; an account with no entries is the
// zero Account.
func ReadSQLAccount(ctx context.Context, db postgres.DB, tables, account string) (Account, error) {
	if err := (SQLHandler{Tables: tables}).check(); err != nil {
		return Account{}, err
	}
	var a Account
	err := db.QueryRow(ctx, `SELECT balance, entries FROM `+tables+`_accounts WHERE account = $1`, account).Scan(&a.Balance, &a.Entries)
	if errors.Is(err, pgx.ErrNoRows) {
		return Account{}, nil
	}
	if err != nil {
		return Account{}, fmt.Errorf("ledger: read account %q: %w", account, err)
	}
	return a, nil
}
