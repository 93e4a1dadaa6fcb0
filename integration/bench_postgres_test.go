package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/internal/awsreq"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/pgtest"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// BenchmarkWorkerPostgres measures, in one run, the claims on PostgreSQL at
// benchConcurrency: the floor (raw pgx issuing the protocol's two
// statements per message, a plain INSERT and a plain UPDATE by key), the
// store alone (Acquire and Complete), and a worker draining a queue on the
// emulator with its claims in PostgreSQL; each as a ratio of the floor.
func BenchmarkWorkerPostgres(b *testing.B) {
	pool := pgtest.Pool(b)
	table := pgtest.Table(b, pool)
	store, err := postgres.New(postgres.Config{DB: pool, Table: table})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// Open every connection first, so that no row pays for them.
	warm := awsreq.NewCounter()
	benchFanOut(b, warm, 20*benchConcurrency, func(int) error {
		_, err := pool.Exec(ctx, "SELECT 1")
		return err
	})
	results := map[string]benchResult{}
	rows := []struct {
		name string
		run  func(*testing.B) benchResult
	}{
		{"floor-pgx", func(b *testing.B) benchResult {
			prefix := fmt.Sprintf("floor_%d_", time.Now().UnixNano())
			return benchFanOut(b, awsreq.NewCounter(), b.N, func(i int) error {
				key := prefix + strconv.Itoa(i)
				if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (key, status, token, acq, lease_until, expires_at, first_at, attempts)
					VALUES ($1, 'IN_PROGRESS', 1, 'a', now(), now(), now(), 1)`, key); err != nil {
					return err
				}
				_, err := pool.Exec(ctx, `UPDATE `+table+` SET status = 'COMPLETED', result = 'ok' WHERE key = $1`, key)
				return err
			})
		}},
		{"store-postgres", func(b *testing.B) benchResult {
			prefix := fmt.Sprintf("store_%d_", time.Now().UnixNano())
			return benchFanOut(b, awsreq.NewCounter(), b.N, func(i int) error {
				now := time.Now()
				a, err := store.Acquire(ctx, claimstore.AcquireParams{Key: prefix + strconv.Itoa(i), Owner: "bench",
					LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour)})
				if err == nil && a.Outcome != claimstore.Acquired {
					err = fmt.Errorf("key %d: outcome %v", i, a.Outcome)
				}
				if err == nil {
					err = store.Complete(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "ok", ExpiresAt: now.Add(24 * time.Hour)})
				}
				return err
			})
		}},
		{"worker-postgres", func(b *testing.B) benchResult {
			cfg, counter := benchConfig(b)
			sq := sqs.NewFromConfig(cfg)
			q, _ := benchResources(b, sq, dynamodb.NewFromConfig(cfg))
			bodies := make([]string, b.N)
			for i := range bodies {
				bodies[i] = fmt.Sprintf(`{"payment_id":"pgbench_%d_%d","amount":100,"currency":"EUR"}`, time.Now().UnixNano(), i)
			}
			benchSend(b, sq, q, bodies)
			depth := sqs.NewFromConfig(awstest.Config(b)) // not counted
			return benchDrain(b, sqsworker.Config{QueueURL: q, SQS: sq, Concurrency: benchConcurrency, Protocol: worker.Protocol{Store: store}}, b.N, counter,
				func() bool { return benchDepth(b, depth, q) == 0 }, nil)
		}},
	}
	var names []string
	for _, r := range rows {
		if b.Run(r.name, func(b *testing.B) { results[r.name] = r.run(b) }) {
			names = append(names, r.name)
		}
	}
	floor, ok := results["floor-pgx"]
	if !ok || floor.msgsPerSec == 0 {
		return
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-16s %9s %9s %11s %9s\n", "row", "msgs/s", "x floor", "cpu-µs/msg", "x floor")
	for _, n := range names {
		r := results[n]
		fmt.Fprintf(&out, "%-16s %9.1f %9.2f %11.0f %9.2f\n", n, r.msgsPerSec, r.msgsPerSec/floor.msgsPerSec, r.cpuPerMsg, r.cpuPerMsg/floor.cpuPerMsg)
	}
	fmt.Print(out.String())
}
