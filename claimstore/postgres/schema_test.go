package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/internal/pgtest"
)

// dropAtEnd drops the named relations when the test ends.
func dropAtEnd(t *testing.T, pool *pgxpool.Pool, names ...string) {
	t.Helper()
	t.Cleanup(func() {
		for _, n := range names {
			if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+n); err != nil {
				t.Logf("drop %s: %v", n, err)
			}
		}
	})
}

// expiryIndexes counts the indexes on table whose first column is expires_at.
func expiryIndexes(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_index i
	JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
	WHERE i.indrelid = $1::regclass AND a.attname = 'expires_at'`, table).Scan(&n)
	if err != nil {
		t.Fatalf("indexes of %s: %v", table, err)
	}
	return n
}

// TestCreateSchemaIndexesLongNames: every table gets its expires_at index,
// whatever the length of its name (PostgreSQL truncates a name at 63
// bytes, so "<table>_expires_at_idx" can collide with the table itself or
// with another table's index), and a name taken by another relation fails
// the setup instead of leaving the sweeper a full scan.
func TestCreateSchemaIndexesLongNames(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	base := pgtest.Name("long") // long_ and 12 hex digits
	pad := func(n int, tail string) string {
		return base + strings.Repeat("x", n-len(base)-len(tail)) + tail
	}
	for _, tc := range []struct {
		name   string
		tables []string
	}{
		{"at_the_limit", []string{pad(48, "")}},
		{"one_past_the_limit", []string{pad(49, "")}},
		{"longest_name", []string{pad(63, "")}},
		// The first's truncated index name is the second table's name.
		{"index_name_is_another_table", []string{pad(63, "_"), pad(62, "")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dropAtEnd(t, pool, tc.tables...)
			for _, table := range tc.tables {
				if err := postgres.CreateSchema(ctx, pool, table); err != nil {
					t.Fatalf("CreateSchema(%s): %v", table, err)
				}
				if err := postgres.CreateSchema(ctx, pool, table); err != nil {
					t.Fatalf("CreateSchema(%s) again: %v", table, err)
				}
			}
			for _, table := range tc.tables {
				if n := expiryIndexes(t, pool, table); n != 1 {
					t.Errorf("table %s (%d characters): %d indexes on expires_at, want 1", table, len(table), n)
				}
			}
		})
	}
	t.Run("index_name_taken", func(t *testing.T) {
		table := pgtest.Name("claims")
		dropAtEnd(t, pool, table, table+"_expires_at_idx")
		if _, err := pool.Exec(ctx, "CREATE TABLE "+table+"_expires_at_idx (x int)"); err != nil {
			t.Fatal(err)
		}
		err := postgres.CreateSchema(ctx, pool, table)
		if err == nil || !strings.Contains(err.Error(), "expires_at") {
			t.Fatalf("CreateSchema with its index's name taken: err = %v, want an error naming the expires_at index", err)
		}
	})
}
