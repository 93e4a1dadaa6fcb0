package postgres

import (
	"context"
	_ "embed"
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
	if _, err := tx.Exec(ctx, strings.ReplaceAll(Schema, DefaultTable, cfg.Table)); err != nil {
		return fmt.Errorf("create schema %s: %w", cfg.Table, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("create schema %s: commit: %w", cfg.Table, err)
	}
	return nil
}

// dbStub satisfies Config.DB for validating a table name alone.
type dbStub struct{ DB }
