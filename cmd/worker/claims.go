package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
)

// defaultForceRetention is how long `claims complete` remembers a key when
// CLAIM_RETENTION is not set: what the worker remembers keys for on the
// queues `worker setup` makes (4 days + 14 days + 24 hours).
const defaultForceRetention = 456 * time.Hour

type claimsCommand struct {
	summary     string
	destructive bool
	run         func(ctx context.Context, c *claimsEnv, key string) error
}

func claimsCommands() map[string]claimsCommand {
	return map[string]claimsCommand{
		"get":      {"print the claim as JSON", false, claimsGet},
		"release":  {"release a stuck IN_PROGRESS claim whose lease has run out (-force: even while it lives): the next delivery takes it over now", true, claimsRelease},
		"complete": {"mark a claim COMPLETED with -result, after a manual reconciliation", true, claimsComplete},
		"forget":   {"delete a COMPLETED claim: the key's next delivery runs the work again", true, claimsForget},
	}
}

var claimsOrder = []string{"get", "release", "complete", "forget"}

func claimsUsage(io stdio) {
	fmt.Fprint(io.stdout, `Usage: worker claims <get|release|complete|forget> KEY [flags]
       worker claims sweep [flags]

Inspect or repair one claim in the claim table. KEY is the idempotency key as
the worker computes it; CLAIM_KEY_PREFIX is prepended as the worker does.
The changing commands refuse to run without -yes and print what they changed.

`)
	for _, name := range claimsOrder {
		fmt.Fprintf(io.stdout, "  %-9s %s\n", name, claimsCommands()[name].summary)
	}
	fmt.Fprintf(io.stdout, "  %-9s %s\n", "sweep", "delete claims past their expiry from a PostgreSQL claim table (STORE=postgres; takes no KEY)")
	fmt.Fprint(io.stdout, "\nRun \"worker claims <command> -h\" for its flags.\n")
}

// claimsEnv is what a claims subcommand works with.
type claimsEnv struct {
	io        stdio
	store     claimstore.Admin
	table     string
	prefix    string
	result    string
	retention time.Duration
	force     bool // release a claim whose lease is still live
	now       func() time.Time
}

// cmdClaims is `worker claims get|release|complete|forget KEY`.
func cmdClaims(ctx context.Context, args []string, io stdio) error {
	if len(args) == 0 {
		claimsUsage(io)
		return usagef("claims: a command is required: get, release, complete, forget or sweep")
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		claimsUsage(io)
		return nil
	}
	if args[0] == "sweep" {
		return cmdClaimsSweep(ctx, args[1:], io)
	}
	sub, ok := claimsCommands()[args[0]]
	if !ok {
		return usagef("claims: unknown command %q: want get, release, complete, forget or sweep", args[0])
	}
	name := "claims " + args[0]
	s := newSettings(name, io)
	table := s.String("claim-table", "CLAIM_TABLE", "", "DynamoDB claim table (required)")
	prefix := s.String("claim-key-prefix", "CLAIM_KEY_PREFIX", "", "prefix the worker puts before claim keys")
	pg := definePostgres(s)
	var yes *bool
	if sub.destructive {
		yes = s.fs.Bool("yes", false, "confirm the change")
	}
	var force *bool
	if args[0] == "release" {
		force = s.fs.Bool("force", false, "release even while the lease lives (the holder must be known dead: the next delivery runs at once)")
	}
	var result *string
	var retention *time.Duration
	if args[0] == "complete" {
		result = s.fs.String("result", "", "the result later deliveries see, e.g. the charge id found by reconciliation (required)")
		retention = s.Duration("claim-retention", "CLAIM_RETENTION", 0, "how long the completed key is remembered, at least (default 456h: the worker's for the queues setup makes)")
	}
	s.fs.Usage = func() {
		fmt.Fprintf(s.fs.Output(), "Usage: worker %s KEY [flags]\n\n%s%s.\n\n", name, strings.ToUpper(sub.summary[:1]), sub.summary[1:])
		s.fs.PrintDefaults()
	}
	key, err := parseWithKey(s, args[1:])
	if err != nil {
		return err
	}
	if yes != nil && !*yes {
		return usagef("%s %s: this changes the claim; refusing without -yes", name, key)
	}
	if err := require(*table, "claim-table", "CLAIM_TABLE"); err != nil {
		return err
	}
	c := &claimsEnv{io: io, table: *table, prefix: *prefix, now: time.Now, force: force != nil && *force}
	if result != nil {
		if *result == "" {
			return usagef("%s: -result is required", name)
		}
		c.result, c.retention = *result, *retention
		if c.retention == 0 {
			c.retention = defaultForceRetention
		}
		if c.retention < 0 {
			return usagef("CLAIM_RETENTION (-claim-retention) %s: must not be negative", c.retention)
		}
	}
	if isPG, err := pg.postgres(); err != nil {
		return err
	} else if isPG {
		store, pool, err := pg.postgresStore(ctx, *table, *prefix)
		if err != nil {
			return err
		}
		defer pool.Close()
		c.store = store
		return claimsError(sub.run(ctx, c, key), c, key)
	}
	cfg, err := loadAWS(ctx)
	if err != nil {
		return err
	}
	store, err := dynamo.New(dynamo.Config{Client: dynamodb.NewFromConfig(cfg), Table: *table, KeyPrefix: *prefix})
	if err != nil {
		return usagef("CLAIM_TABLE: %v", err)
	}
	c.store = store
	err = claimsError(sub.run(ctx, c, key), c, key)
	if rnf := (*types.ResourceNotFoundException)(nil); errors.As(err, &rnf) {
		return fmt.Errorf("claim table %s not found in DynamoDB: if the claims are in PostgreSQL, set STORE=postgres (and DATABASE_URL) as the worker has it: %w", *table, err)
	}
	return err
}

// parseWithKey parses args, which hold one KEY anywhere among the flags.
func parseWithKey(s *settings, args []string) (string, error) {
	if len(s.errs) > 0 {
		return "", usageError{msg: s.errs[0].Error()}
	}
	name := strings.TrimPrefix(s.fs.Name(), "worker ")
	var keys []string
	s.helpToStdout(args)
	for {
		if err := s.fs.Parse(args); err != nil {
			return "", parseError(err)
		}
		if s.fs.NArg() == 0 {
			break
		}
		keys = append(keys, s.fs.Arg(0))
		args = s.fs.Args()[1:]
	}
	s.applyEnv()
	switch len(keys) {
	case 0:
		return "", usagef("%s: KEY is required", name)
	case 1:
		return keys[0], nil
	default:
		return "", usagef("%s: one KEY, got %d (%s)", name, len(keys), strings.Join(keys, " "))
	}
}

// claimsError makes the store's refusals one line an operator can act on.
func claimsError(err error, c *claimsEnv, key string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, claimstore.ErrNotFound):
		return fmt.Errorf("claim %q not found in table %s (stored key %q)", key, c.table, claimstore.StoredKey(c.prefix, key))
	case errors.Is(err, claimstore.ErrInvalidKey):
		return usagef("KEY %q: %v", key, err)
	}
	return err
}

// claimJSON is a claim as `claims get` prints it: each instant as RFC 3339
// and as the number stored, in the unit its name says.
type claimJSON struct {
	Key          string  `json:"key"`
	StoredKey    string  `json:"stored_key"`
	Status       string  `json:"status"`
	Token        int64   `json:"token"`
	Acq          string  `json:"acq"`
	LeaseUntil   string  `json:"lease_until"`
	LeaseUntilMS int64   `json:"lease_until_ms"`
	LeaseLeft    *string `json:"lease_left,omitempty"`
	ExpiresAt    string  `json:"expires_at"`
	ExpiresAtS   int64   `json:"expires_at_s"`
	FirstAt      *string `json:"first_at"`
	FirstAtMS    *int64  `json:"first_at_ms"`
	Owner        string  `json:"owner"`
	Attempts     int64   `json:"attempts"`
	// Takeovers is how many times a later delivery took the key over
	// from an earlier holder (whose lease ended, or who released it): the
	// token less one. The previous owner is in the taker's log line "took
	// over the key from an earlier holder"; the row keeps only the last.
	Takeovers   int64  `json:"takeovers"`
	Result      string `json:"result"`
	Fingerprint string `json:"fingerprint"`
	LastError   string `json:"last_error"`
}

func toJSON(c claimstore.Claim, prefix string, now time.Time) claimJSON {
	j := claimJSON{
		Key: c.Key, StoredKey: claimstore.StoredKey(prefix, c.Key), Status: string(c.Status), Token: c.Token, Acq: c.Acq,
		LeaseUntil: rfc3339(c.LeaseUntil), LeaseUntilMS: c.LeaseUntil.UnixMilli(),
		ExpiresAt: rfc3339(c.ExpiresAt), ExpiresAtS: c.ExpiresAt.Unix(),
		Owner: c.Owner, Attempts: c.Attempts, Takeovers: max(c.Token-1, 0), Result: c.Result, Fingerprint: c.Fingerprint, LastError: c.LastError,
	}
	if c.Status == claimstore.StatusInProgress {
		left := max(c.LeaseUntil.Sub(now), 0).Round(time.Millisecond).String()
		j.LeaseLeft = &left
	}
	if !c.FirstAt.IsZero() {
		t, ms := rfc3339(c.FirstAt), c.FirstAt.UnixMilli()
		j.FirstAt, j.FirstAtMS = &t, &ms
	}
	return j
}

func rfc3339(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func claimsGet(ctx context.Context, c *claimsEnv, key string) error {
	cl, err := c.store.Get(ctx, key)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(c.io.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(toJSON(cl, c.prefix, c.now()))
}

func claimsRelease(ctx context.Context, c *claimsEnv, key string) error {
	if !c.force {
		cl, err := c.store.Get(ctx, key)
		if err != nil {
			return err
		}
		if left := cl.LeaseUntil.Sub(c.now()); cl.Status == claimstore.StatusInProgress && left > 0 {
			return fmt.Errorf("claim %q is held by %s (token %d) for %s more: its holder may still be working, and releasing it now lets the next delivery run beside it; wait until lease_left is 0, or pass -force if the holder is known dead; nothing changed",
				key, cl.Owner, cl.Token, left.Round(time.Second))
		}
	}
	before, err := c.store.ForceRelease(ctx, key)
	if err != nil {
		return wrongState(err, before, "only an IN_PROGRESS claim can be released")
	}
	fmt.Fprintf(c.io.stdout, "released %s: status %s -> %s (token %d, owner %s, lease until %s); the next delivery takes it over\n",
		key, before.Status, claimstore.StatusReleased, before.Token, before.Owner, rfc3339(before.LeaseUntil))
	return nil
}

func claimsComplete(ctx context.Context, c *claimsEnv, key string) error {
	before, err := c.store.ForceComplete(ctx, claimstore.ForceCompleteParams{Key: key, Result: c.result, ExpiresAt: c.now().Add(c.retention)})
	if err != nil {
		return wrongState(err, before, "only an IN_PROGRESS or RELEASED claim can be completed")
	}
	after, err := c.store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("completed %s, but reading it back failed: %w", key, err)
	}
	fmt.Fprintf(c.io.stdout, "completed %s: status %s -> %s, result %q -> %q, expires_at %s -> %s (token %d); later deliveries are duplicates\n",
		key, before.Status, after.Status, before.Result, after.Result, rfc3339(before.ExpiresAt), rfc3339(after.ExpiresAt), after.Token)
	return nil
}

func claimsForget(ctx context.Context, c *claimsEnv, key string) error {
	before, err := c.store.Forget(ctx, key)
	if err != nil {
		return wrongState(err, before, "only a COMPLETED claim can be forgotten")
	}
	fmt.Fprintf(c.io.stdout, "forgot %s: status %s (result %q, token %d) -> absent; the key's next delivery runs the work again\n",
		key, before.Status, before.Result, before.Token)
	return nil
}

// wrongState says what the claim's status is and what the command needs.
func wrongState(err error, before claimstore.Claim, need string) error {
	switch {
	case errors.Is(err, claimstore.ErrWrongState):
		return fmt.Errorf("claim %q is %s: %s; nothing changed", before.Key, before.Status, need)
	case errors.Is(err, claimstore.ErrClaimChanged):
		return fmt.Errorf("claim %q changed while the command ran; nothing changed: look again with worker claims get", before.Key)
	}
	return err
}
