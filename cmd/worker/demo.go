package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/claimstore/postgres"
	"github.com/claimfirst/claimfirst/demo"
	"github.com/claimfirst/claimfirst/ledger"
)

// cmdDemo runs the experiments of package demo and prints their tables.
func cmdDemo(ctx context.Context, args []string, io stdio) error {
	s := newSettings("demo", io)
	store := s.String("store", "", "memory", "claim store for the claim-based rows: memory, dynamodb or postgres (on DATABASE_URL)")
	// No environment variable: with the walkthrough's CLAIM_TABLE exported,
	// the demo would write its thousands of claims into the worker's table.
	table := s.String("table", "", "", "claim table for the demo's own claims, created if missing (required with -store dynamodb; never the worker's CLAIM_TABLE); experiment 7's ledger goes in <table>-ledger")
	experiment := s.Int("experiment", "", 0, fmt.Sprintf("experiment to run, 1 to %d (0: all)", demo.Experiments))
	payments := s.Int("payments", "", 2000, fmt.Sprintf("payments per row, %d to %d", demo.MinPayments, demo.MaxPayments))
	seed := s.Int("seed", "", 1, "chooses which payments are redelivered, fail, crash, time out or come late")
	if err := s.Parse(args); err != nil {
		return err
	}
	if *experiment < 0 || *experiment > demo.Experiments {
		return usagef("-experiment %d: want 1 to %d, or 0 for all", *experiment, demo.Experiments)
	}
	if *payments < demo.MinPayments || *payments > demo.MaxPayments {
		return usagef("-payments %d: want %d to %d", *payments, demo.MinPayments, demo.MaxPayments)
	}
	opts := demo.Options{
		Payments:   *payments,
		Seed:       int64(*seed),
		Experiment: *experiment,
	}
	if isTerminal(io.stderr) {
		// Progress is for a person watching; a log or a pipe gets the tables
		// and the closing line only.
		opts.Progress = io.stderr
	}
	switch *store {
	case "memory":
	case "dynamodb":
		if *table == "" {
			return usagef("-table is required with -store dynamodb (a table of its own: the demo does not use CLAIM_TABLE)")
		}
		cfg, err := loadAWS(ctx)
		if err != nil {
			return err
		}
		client := dynamodb.NewFromConfig(cfg)
		if err := dynamo.CreateTable(ctx, client, dynamo.TableSpec{Name: *table}); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		opts.NewStore = demo.DynamoDBStores(client, *table)
		if *experiment == 0 || *experiment == 7 {
			// Experiment 7's ledger, beside the claims: committed with them
			// in real transactions.
			lt := *table + "-ledger"
			if err := ledger.CreateTable(ctx, client, lt); err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			opts.Ledger = &demo.DynamoDBLedger{Client: client, Table: lt}
		}
	case storePostgres:
		pg := pgSettings{url: new(string), getenv: io.getenv}
		pool, err := pg.openPool(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		if *table == "" {
			*table = "claimfirst_demo"
		}
		if err := postgres.CreateSchema(ctx, pool, *table); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		opts.NewStore = demo.PostgresStores(pool, *table)
		if *experiment == 0 || *experiment == 7 {
			pl := demo.PostgresLedger{DB: pool, Tables: *table + "_ledger"}
			if err := demo.CreatePostgresLedger(ctx, pl); err != nil {
				return err
			}
			opts.PostgresLedger = &pl
		}
	default:
		return usagef("-store %q: want memory, dynamodb or postgres", *store)
	}
	start := time.Now()
	if err := demo.Run(ctx, opts, io.stdout); err != nil {
		return err
	}
	fmt.Fprintf(io.stderr, "demo: claim store %s, %d payments, seed %d: done in %s\n",
		*store, *payments, *seed, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// isTerminal reports whether w is a character device, as a terminal is.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
