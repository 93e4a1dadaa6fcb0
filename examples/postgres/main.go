// Command postgres is the quick start with its claims in PostgreSQL: each
// ledger entry from an SQS queue is inserted once, in one transaction with
// its claim's completion, and expired claims are swept.
//
//	DATABASE_URL=postgres://... QUEUE_URL=... go run .
package main

import (
	"context"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/keyexpr"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	// The claim table (as `worker setup -postgres` does) and the entries.
	if err := postgres.CreateSchema(ctx, pool, "claims"); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS entries (id text PRIMARY KEY, body text NOT NULL)"); err != nil {
		return err
	}
	store, err := postgres.New(postgres.Config{DB: pool, Table: "claims"})
	if err != nil {
		return err
	}
	// No TTL here: delete expired claims every minute (CLAIM_SWEEP_INTERVAL).
	go store.SweepEvery(ctx, time.Minute, postgres.SweepParams{}, slog.Default())
	dec, err := worker.KeyFromJMESPath(keyexpr.Config{Key: "entry_id"}) // {"entry_id": "e_1", ...}
	if err != nil {
		return err
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	w, err := sqsworker.New(ctx, sqsworker.Config{
		QueueURL: os.Getenv("QUEUE_URL"),
		SQS:      sqs.NewFromConfig(cfg),
		Protocol: worker.Protocol{
			Store: store, Decoder: dec,
			Handler: worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
				// Not run now: committed with the claim's completion, in
				// its transaction, only while this delivery holds the claim.
				m.Commit(worker.Tx{Writes: postgres.Writes(func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "INSERT INTO entries (id, body) VALUES ($1, $2)", m.Key, m.Body)
					return err
				})})
				return "inserted", nil
			}),
		},
	})
	if err != nil {
		return err
	}
	return w.Run(ctx) // returns when ctx ends (SIGTERM) and the handlers in flight finish, within ShutdownTimeout
}
