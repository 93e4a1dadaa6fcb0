package demo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/once"
)

// ledgerEntry is experiment 7's message: append entry EntryID to the ledger
// and move Account's balance by Amount.
type ledgerEntry struct {
	EntryID string `json:"entry_id"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// ledgerAccounts is how many accounts experiment 7's entries move.
const ledgerAccounts = 50

// ledger is experiment 7's database: a journal of entries, appended, and a
// balance per account. Its lock also makes a claim's completion and a ledger
// write one step (see commit), the in-memory equivalent of a DynamoDB
// transaction that holds both.
type ledger struct {
	mu       sync.Mutex
	journal  []ledgerEntry
	balances map[string]int64
}

func newLedger() *ledger { return &ledger{balances: make(map[string]int64)} }

// write appends e and moves its account's balance: an ordinary write, with no
// tie to any claim.
func (l *ledger) write(_ context.Context, e ledgerEntry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.apply(e)
	return nil
}

func (l *ledger) apply(e ledgerEntry) {
	l.journal = append(l.journal, e)
	l.balances[e.Account] += e.Amount
}

// commit completes p's claim and writes e as one step: both or neither. The
// claim's condition (p still holds it, as Complete checks) is the
// transaction's; if it fails the ledger is unchanged and the error is
// claimstore.ErrLeaseLost. A commit that finds the claim already completed by
// p is p's own earlier commit: it succeeds and writes nothing again.
//
// It is atomic because every commit and every ledger write takes l's lock,
// and the store is in the same process memory as the ledger (a memory
// store): a process that dies loses both, never one. Over a store in another
// process it would not be, which is why experiment 7 always keeps its claims
// in memory.
func (l *ledger) commit(ctx context.Context, store claimstore.Store, p claimstore.CompleteParams, e ledgerEntry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, err := store.Get(ctx, p.Key); err == nil && c.Acq == p.Acq && c.Status == claimstore.StatusCompleted {
		return nil
	}
	if err := store.Complete(ctx, p); err != nil {
		return err
	}
	l.apply(e)
	return nil
}

// entries returns the number of entries in the journal, the entries per
// entry id, and the balances.
func (l *ledger) entries(context.Context) (n int, byID map[string]int, balances map[string]int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	byID = make(map[string]int, len(l.journal))
	for _, e := range l.journal {
		byID[e.EntryID]++
	}
	balances = make(map[string]int64, len(l.balances))
	for a, b := range l.balances {
		balances[a] = b
	}
	return len(l.journal), byID, balances, nil
}

// ledgerResult is what experiment 7 measured: workers die right after their
// database write, before the claim's completion, and the broker redelivers.
type ledgerResult struct {
	// WriteThenComplete writes the entry, then completes the claim: two
	// writes, with a window between them.
	WriteThenComplete ledgerRow
	// OneTransaction completes the claim and writes the entry in one
	// transaction, fenced by the claim.
	OneTransaction ledgerRow
}

// ledgerRow is one handler's numbers in experiment 7.
type ledgerRow struct {
	// Payments is the number of distinct ledger messages, one entry each.
	Payments int
	// Crashed counts the workers that died right after the database write.
	Crashed int
	// Entries is the number of entries in the ledger.
	Entries int
	// BalanceError is the sum over accounts of how far the balance is from
	// the sum of its entries' amounts counted once.
	BalanceError int64
	// Takeovers counts claims acquired over a dead holder's claim.
	Takeovers int
	// Duplicates counts deliveries acked because their claim was completed.
	Duplicates int
	// effects counts the entries written more than once, or never.
	effects
}

func (r ledgerResult) rows() []tableRow {
	row := func(label string, x ledgerRow) tableRow {
		return tableRow{label, []pair{{"payments", x.Payments}, {"crashed", x.Crashed}, {"ledger entries", x.Entries}}, x.effects}
	}
	return []tableRow{
		row("write, then complete", r.WriteThenComplete),
		row("one transaction", r.OneTransaction),
	}
}

// runLedger runs experiment 7: opts.Payments ledger messages, each appending
// one entry and moving one of 50 balances; for 1 in 50 (exactly
// opts.Payments/50, chosen by opts.Seed) the worker dies on the first
// receive right after its database write took effect, so it neither acks
// nor (in the first row) completes the claim. The broker redelivers after
// the visibility timeout, when the dead worker's lease has ended. Both
// handlers claim first with a lease, as the protocol does.
//
// Without opts.runLedger the ledger is in memory and the claims are in a memory
// store whatever opts.NewStore says: the one-transaction row needs the claim
// and the ledger in one database. With it, the ledger is a DynamoDB table
// and the claims are in opts.NewStore's stores, committed with the entries
// in real transactions.
func runLedger(ctx context.Context, opts Options) (ledgerResult, error) {
	if err := opts.setDefaults(); err != nil {
		return ledgerResult{}, err
	}
	entries := ledgerEntries(opts.Payments, opts.Seed)
	ids := make([]string, len(entries))
	msgs := make([]message, len(entries))
	want := make(map[string]int64)
	for i, e := range entries {
		ids[i] = e.EntryID
		msgs[i] = message{entry: e, receives: 1}
		want[e.Account] += e.Amount
	}
	dying := chooseIDs(ids, faultEvery, opts.Seed, saltLedger)
	run := func(label string, transactional bool) (ledgerRow, error) {
		c := &clock{}
		var store claimstore.Store = memory.New(memory.Config{Now: c.Now})
		var db ledgerDB = newLedger()
		if opts.Ledger != nil || opts.PostgresLedger != nil {
			ns := opts.namespace("ledger-" + map[bool]string{false: "write", true: "tx"}[transactional])
			s, err := opts.NewStore(ctx, ns, c.Now)
			if err != nil {
				return ledgerRow{}, err
			}
			if pl := opts.PostgresLedger; pl != nil {
				store, db = s, &pgLedger{db: pl.DB, tables: pl.Tables, ns: ns}
			} else {
				store, db = s, &dynamoLedger{api: opts.Ledger.Client, table: opts.Ledger.Table, ns: ns}
			}
		}
		b := &broker{workers: opts.Workers, clock: c, progress: opts.progress}
		var crashed, takeovers, duplicates atomic.Int64
		opts.progress.row(label, len(msgs))
		_, err := b.run(ctx, msgs, func(ctx context.Context, m message) (verdict, error) {
			cl, _, err := once.Acquire(ctx, store, m.entry.EntryID, once.Options{
				Owner: "demo", Lease: visibilityTimeout - leaseMargin, Retention: retention, Now: c.Now,
			})
			var held *once.HeldError
			switch {
			case errors.As(err, &held):
				return later, nil
			case err != nil:
				return 0, err
			case cl == nil: // completed before
				duplicates.Add(1)
				return ack, nil
			}
			holder := cl.Holder()
			if holder.Token > 1 {
				takeovers.Add(1)
			}
			dies := m.receives == 1 && dying[m.entry.EntryID]
			done := claimstore.CompleteParams{Holder: holder, Result: m.entry.EntryID, ExpiresAt: c.Now().Add(retention)}
			if transactional {
				if err := db.commit(ctx, store, done, m.entry); err != nil {
					return 0, fmt.Errorf("commit: %w", err)
				}
				if dies { // after the commit, before the ack
					crashed.Add(1)
					return later, nil
				}
				return ack, nil
			}
			if err := db.write(ctx, m.entry); err != nil {
				return 0, fmt.Errorf("write: %w", err)
			}
			if dies { // after the write, before the completion
				crashed.Add(1)
				return later, nil
			}
			if err := cl.Complete(ctx, m.entry.EntryID); err != nil {
				return 0, fmt.Errorf("complete: %w", err)
			}
			return ack, nil
		})
		if err != nil {
			return ledgerRow{}, fmt.Errorf("%s: %w", label, err)
		}
		n, byID, balances, err := db.entries(ctx)
		if err != nil {
			return ledgerRow{}, fmt.Errorf("%s: %w", label, err)
		}
		var off int64
		for acct, w := range want {
			d := balances[acct] - w
			off += max(d, -d)
		}
		return ledgerRow{
			Payments: len(entries), Crashed: int(crashed.Load()), Entries: n, BalanceError: off,
			Takeovers: int(takeovers.Load()), Duplicates: int(duplicates.Load()),
			effects: countEffects(ids, byID),
		}, nil
	}
	var res ledgerResult
	var err error
	if res.WriteThenComplete, err = run("write, then complete", false); err != nil {
		return res, err
	}
	res.OneTransaction, err = run("one transaction", true)
	return res, err
}

// ledgerEntries returns n entries with ids ent_00001..., their accounts and
// amounts chosen by seed.
func ledgerEntries(n int, seed int64) []ledgerEntry {
	rng := rand.New(rand.NewPCG(uint64(seed), saltLedger<<8))
	es := make([]ledgerEntry, n)
	for i := range es {
		es[i] = ledgerEntry{
			EntryID: fmt.Sprintf("ent_%05d", i+1),
			Account: fmt.Sprintf("acct_%02d", 1+rng.IntN(ledgerAccounts)),
			Amount:  100 + rng.Int64N(99_900),
		}
	}
	return es
}
