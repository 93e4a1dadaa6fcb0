package postgres

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Schema is the claim table's schema, version 1, as shipped in
// schema/v1.sql: the table, the expiry index the sweeper uses, and a
// comment naming the version. Every statement is idempotent.
//
//go:embed schema/v1.sql
var Schema string

// SchemaVersion is the version of Schema.
const SchemaVersion = 1

// Beginner is the part of a pool CreateSchema needs.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// CreateSchema creates the claim table named table ("" for DefaultTable)
// and its index if they are missing, in one transaction under an advisory
// lock, so that concurrent setups do not collide. Running it again changes
// nothing.
func CreateSchema(ctx context.Context, db Beginner, table string) error {
	cfg := Config{Table: table, DB: dbStub{}}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The lock's id is the table's name: setups of other tables run on.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "claimfirst schema "+cfg.Table); err != nil {
		return fmt.Errorf("create schema: lock: %w", err)
	}
	index := indexName(cfg.Table)
	schema := strings.ReplaceAll(Schema, indexName(DefaultTable), index)
	if _, err := tx.Exec(ctx, strings.ReplaceAll(schema, DefaultTable, cfg.Table)); err != nil {
		return fmt.Errorf("create schema %s: %w", cfg.Table, err)
	}
	// CREATE INDEX IF NOT EXISTS skips an index whose name another relation
	// holds, with only a notice: without the index the sweeper scans the
	// whole table on every run.
	var indexed bool
	err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i
	JOIN pg_class c ON c.oid = i.indexrelid
	JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
	WHERE i.indrelid = $1::regclass AND c.relname = $2 AND a.attname = 'expires_at')`, cfg.Table, index).Scan(&indexed)
	if err != nil {
		return fmt.Errorf("create schema %s: check index %s: %w", cfg.Table, index, err)
	}
	if !indexed {
		return fmt.Errorf("create schema %s: the name %s of its expires_at index belongs to another relation: drop or rename it", cfg.Table, index)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("create schema %s: commit: %w", cfg.Table, err)
	}
	return nil
}

// maxName is PostgreSQL's longest identifier in bytes (NAMEDATALEN - 1);
// a longer one is truncated.
const maxName = 63

// indexName is the name of table's expires_at index: table followed by
// "_expires_at_idx" when that fits in PostgreSQL's 63 bytes; otherwise the
// table's name cut short and a hash of the whole, so that the name is never
// truncated into the table's own or another table's index name.
func indexName(table string) string {
	const suffix = "_expires_at_idx"
	if len(table)+len(suffix) <= maxName {
		return table + suffix
	}
	sum := sha256.Sum256([]byte(table))
	h := "_" + hex.EncodeToString(sum[:4])
	return table[:maxName-len(suffix)-len(h)] + h + suffix
}

// dbStub satisfies Config.DB for validating a table name alone.
type dbStub struct{ DB }
