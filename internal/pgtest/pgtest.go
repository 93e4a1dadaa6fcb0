// Package pgtest gives tests a PostgreSQL server: the throwaway cluster
// `make test` starts (emulator/with-postgres.sh), or a user's own named by
// DATABASE_URL. Without one it skips those tests with a message saying how
// to run them.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimfirst/claimfirst/claimstore/postgres"
)

// RequiredEnv is set by the PostgreSQL launcher; when it is set a test that
// has no DATABASE_URL fails instead of skipping.
const RequiredEnv = "CLAIMFIRST_POSTGRES"

// URL returns DATABASE_URL, or skips the test (fails it under `make test`).
func URL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("DATABASE_URL")
	if u == "" {
		if os.Getenv(RequiredEnv) != "" {
			tb.Fatalf("%s is set but DATABASE_URL is not: the PostgreSQL launcher did not export it", RequiredEnv)
		}
		tb.Skip("needs PostgreSQL: run `make test`, or set DATABASE_URL to a server (emulator/with-postgres.sh starts a throwaway one)")
	}
	return u
}

// Pool returns a pool on DATABASE_URL, closed when the test ends.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return PoolAt(tb, "")
}

// Addr is DATABASE_URL's host:port, for a proxy in front of the server.
func Addr(tb testing.TB) string {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(URL(tb))
	if err != nil {
		tb.Fatalf("DATABASE_URL: %v", err)
	}
	return net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
}

// PoolAt returns a pool on DATABASE_URL's database reached at addr
// (host:port; "" for DATABASE_URL's own), closed when the test ends.
func PoolAt(tb testing.TB, addr string) *pgxpool.Pool {
	tb.Helper()
	u := URL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		tb.Fatalf("DATABASE_URL: %v", err)
	}
	if addr != "" {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			tb.Fatal(err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			tb.Fatal(err)
		}
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
		cfg.ConnConfig.Fallbacks = nil
	}
	if cfg.MaxConns < 20 {
		cfg.MaxConns = 20
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		tb.Fatalf("connect to DATABASE_URL: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Table creates a claim table of its own for the test (dropped when it
// ends) and returns its name.
func Table(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	name := Name("claims")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := postgres.CreateSchema(ctx, pool, name); err != nil {
		tb.Fatalf("create claim table: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
			tb.Logf("drop %s: %v", name, err)
		}
	})
	return name
}

// Name returns a unique lower-case SQL name with the given prefix.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}
