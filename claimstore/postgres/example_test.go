package postgres_test

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// A handler whose effect is rows in PostgreSQL hands its SQL to the worker:
// the claim's completion and these statements commit in one transaction,
// the completion first, only while this delivery holds the claim. A
// constraint violation (class 23) goes to the Tx's Rejected with the claim
// still held.
func ExampleWrites() {
	h := worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
		m.Commit(worker.Tx{Writes: postgres.Writes(func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO orders (id, token) VALUES ($1, $2)", m.Key, m.Token)
			return err
		})})
		return "ordered", nil
	})
	cfg := sqsworker.Config{}
	cfg.Handler = h // with Store: a *postgres.Store
	_ = cfg
}
