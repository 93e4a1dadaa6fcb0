package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/claimstore/memory"
)

// Limits of Options.Payments: one payment in 50 is faulty in experiments 2
// to 4, 7 and 8, so fewer than 50 would show nothing.
const (
	MinPayments = 50
	MaxPayments = 1_000_000
)

// Experiments is the number of experiments; Options.Experiment is 1 to
// Experiments, or 0 for all.
const Experiments = 9

// StoreFactory returns the claim store for one row of an experiment. Every
// call must give a store in which no key has been claimed yet: a fresh memory
// store, or a shared table under namespace, a key prefix unique to the row.
// The store must judge leases and expiry by now, which the demo moves forward
// instead of sleeping.
type StoreFactory func(ctx context.Context, namespace string, now func() time.Time) (claimstore.Store, error)

// MemoryStores returns a StoreFactory that gives every row a fresh memory store.
func MemoryStores() StoreFactory {
	return func(_ context.Context, _ string, now func() time.Time) (claimstore.Store, error) {
		return memory.New(memory.Config{Now: now}), nil
	}
}

// DynamoDBStores returns a StoreFactory of DynamoDB stores on table (which
// must exist: see dynamo.CreateTable), each row's keys under its namespace.
func DynamoDBStores(client dynamo.API, table string) StoreFactory {
	return func(_ context.Context, namespace string, now func() time.Time) (claimstore.Store, error) {
		return dynamo.New(dynamo.Config{Client: client, Table: table, KeyPrefix: namespace, Now: now})
	}
}

// Options configure the experiments.
type Options struct {
	// Payments is the number of distinct payments per row, from MinPayments
	// to MaxPayments. Defaults to 2000.
	Payments int
	// Seed chooses which payments (orders, ledger entries) are redelivered,
	// fail, crash, time out or come late, and their amounts; the same seed
	// chooses the same payments. Defaults to 0.
	Seed int64
	// Workers is the number of deliveries handled at once. Defaults to 8.
	Workers int
	// NewStore gives each claim-based row its claim store, except in
	// experiment 7 without Ledger, which keeps its claims in memory next to
	// its in-memory ledger. Defaults to MemoryStores().
	NewStore StoreFactory
	// Ledger, if set, keeps experiment 7's ledger in DynamoDB, its claims in
	// NewStore's stores (which must be DynamoDB's), committed together in
	// real transactions. Defaults to nil: in memory.
	Ledger *DynamoDBLedger
	// PostgresLedger, if set, keeps experiment 7's ledger in PostgreSQL, its
	// claims in NewStore's stores (which must be PostgreSQL's on the same
	// database), committed together in real transactions. Defaults to nil.
	PostgresLedger *PostgresLedger
	// Experiment selects the experiment Run runs, 1 to Experiments. Defaults
	// to 0: all of them.
	Experiment int
	// Progress receives a line about the running row every few seconds once
	// Run has taken more than a few seconds, never while Run writes a table.
	// Defaults to nil: no progress.
	Progress io.Writer

	progress       *progress     // set by Run
	progressAfter  time.Duration // the first progress line; set by defaults
	progressEvery  time.Duration // the next ones; set by defaults
	runID          string        // namespaces the rows' keys; set by defaults
	attemptTimeout time.Duration // experiment 4's client timeout; set by defaults
}

func (o *Options) setDefaults() error {
	if o.Payments == 0 {
		o.Payments = 2000
	}
	if o.Workers == 0 {
		o.Workers = 8
	}
	if o.NewStore == nil {
		o.NewStore = MemoryStores()
	}
	if o.progressAfter == 0 {
		o.progressAfter = progressAfter
	}
	if o.progressEvery == 0 {
		o.progressEvery = progressEvery
	}
	if o.attemptTimeout == 0 {
		o.attemptTimeout = attemptTimeout
	}
	if o.runID == "" {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("demo: run id: %w", err)
		}
		o.runID = hex.EncodeToString(b[:])
	}
	return o.validate()
}

func (o *Options) validate() error {
	var errs []error
	if o.Payments < MinPayments || o.Payments > MaxPayments {
		errs = append(errs, fmt.Errorf("Payments is %d, want %d to %d", o.Payments, MinPayments, MaxPayments))
	}
	if o.Workers < 2 {
		errs = append(errs, fmt.Errorf("Workers is %d, want at least 2 (a duplicate needs a second worker to race)", o.Workers))
	}
	if o.Experiment < 0 || o.Experiment > Experiments {
		errs = append(errs, fmt.Errorf("Experiment is %d, want 1 to %d, or 0 for all", o.Experiment, Experiments))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

// namespace is the key prefix of one row's claims.
func (o *Options) namespace(row string) string {
	return "demo/" + o.runID + "/" + row + "/"
}

// textWidth is where headings and summaries wrap.
const textWidth = 80

// Run runs the experiment opts.Experiment (or all) and writes each one's
// heading, table and a sentence saying what it shows to w.
func Run(ctx context.Context, opts Options, w io.Writer) error {
	if err := opts.setDefaults(); err != nil {
		return err
	}
	if opts.Progress != nil {
		opts.progress = newProgress(opts.Progress)
		stop := opts.progress.start(opts.progressAfter, opts.progressEvery)
		defer stop()
	}
	type experiment struct {
		heading, summary string
		run              func(context.Context, Options) ([]tableRow, error)
	}
	experiments := []experiment{
		{
			"Experiment 1: a duplicate arrives while the first copy is being charged",
			"Both copies pass the check before either is remembered; only a claim that one caller can win charges each payment once.",
			func(ctx context.Context, o Options) ([]tableRow, error) {
				r, err := runRace(ctx, o)
				return r.rows(), err
			},
		},
		{
			"Experiment 2: the provider fails some first attempts; the broker redelivers",
			"A claim kept after a failure makes the redelivery skip the payment, which is never charged; releasing it lets the redelivery take over.",
			func(ctx context.Context, o Options) ([]tableRow, error) {
				r, err := runRelease(ctx, o)
				return r.rows(), err
			},
		},
		{
			"Experiment 3: a worker dies between claim and charge; the broker redelivers",
			"No release code runs in a crash: a claim without a lease blocks the redelivery until the message is dead-lettered; a lease that ends with the visibility timeout lets the redelivery take over with the next fencing token.",
			func(ctx context.Context, o Options) ([]tableRow, error) {
				r, err := runLease(ctx, o)
				return r.rows(), err
			},
		},
		{
			"Experiment 4: the provider charges but the answer times out; the client retries",
			"Only the provider knows whether it charged: a retry without the key charges again, a retry with the same Idempotency-Key gets the first charge back.",
			func(ctx context.Context, o Options) ([]tableRow, error) {
				r, err := runKey(ctx, o)
				return r.rows(), err
			},
		},
		{
			"Experiment 5: natural idempotency: a shipment message delivered twice",
			"Adding one on each delivery ships a duplicate again; a write that states the new state, or a transition conditioned on the old one, is idempotent without a claim, and the condition also tells the duplicate apart.",
			func(ctx context.Context, o Options) ([]tableRow, error) {
				r, err := runNatural(ctx, o)
				return r.rows(), err
			},
		},
		{
			fmt.Sprintf("Experiment 6: how long to remember: %d duplicates arrive two hours late (simulated clock)",
				opts.Payments/redeliverEvery),
			"A claim that is forgotten before the last redelivery can arrive lets the late duplicate in as a new payment; claims must be kept longer than the queue keeps a message.",
			func(ctx context.Context, o Options) ([]tableRow, error) {
				r, err := runRemember(ctx, o)
				return r.rows(), err
			},
		},
		{
			"Experiment 7: a worker dies between the database write and the claim's completion",
			"Written first and completed after, the entry is written again by the redelivery that takes the dead worker's claim over; committed in one transaction with the claim's completion, it is written with it or not at all.",
			func(ctx context.Context, o Options) ([]tableRow, error) {
				r, err := runLedger(ctx, o)
				return r.rows(), err
			},
		},
		{
			"Experiment 8: the provider forgets keys after 24 hours; a retry comes later (simulated clock)",
			"The key protects a retry only while the provider remembers it. A retry whose claim was first acquired longer ago than the key lifetime looks the charge up and completes with it instead of charging again.",
			func(ctx context.Context, o Options) ([]tableRow, error) {
				r, err := runForget(ctx, o)
				return r.rows(), err
			},
		},
		{
			"Experiment 9: Kafka: a member joins the consumer group mid-run, another dies before committing (kfake, in process)",
			"Charged, then committed, a record the dead member charged is read again by its partition's next owner and charged again, as is a producer's retry; claimed first on the payment id, every copy after the first replays the charge, and the committed offsets reach the end offsets.",
			func(ctx context.Context, o Options) ([]tableRow, error) {
				r, err := runKafka(ctx, o)
				return r.rows(), err
			},
		},
	}
	first := true
	for i, e := range experiments {
		if opts.Experiment != 0 && opts.Experiment != i+1 {
			continue
		}
		rows, err := e.run(ctx, opts)
		if err != nil {
			return fmt.Errorf("demo: experiment %d: %w", i+1, err)
		}
		sep := "\n"
		if first {
			sep = ""
		}
		first = false
		// Headings stay on one line, as the README shows them.
		err = opts.progress.write(func() error {
			_, err := fmt.Fprintf(w, "%s%s\n\n%s\n%s\n", sep, e.heading, formatTable(rows), wrap(e.summary, textWidth))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}
