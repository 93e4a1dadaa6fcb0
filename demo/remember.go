package demo

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Experiment 6's timing, on the store's clock: claims kept for shortKeep
// forget a payment before its late duplicate arrives lateBy after the first
// copies were handled. The heading spells these out.
const (
	shortKeep = time.Hour
	lateBy    = 2 * time.Hour
)

// rememberResult is what experiment 6 measured: duplicates that arrive two
// hours after their payments were charged, under claims kept for an hour and
// claims kept past the queue's retention.
type rememberResult struct {
	// Short keeps completed claims for one hour.
	Short rememberRow
	// PastRetention keeps completed claims longer than the queue keeps a
	// message (seven days; SQS keeps four by default).
	PastRetention rememberRow
}

// rememberRow is one retention's numbers in experiment 6.
type rememberRow struct {
	// Payments is the number of distinct payments.
	Payments int
	// Late counts the duplicates delivered two hours late.
	Late int
	// Charges is the number of charges the provider made.
	Charges int
	// Duplicates counts deliveries acked because their claim was completed.
	Duplicates int
	// effects counts the payments charged more than once, or never.
	effects
}

func (r rememberResult) rows() []tableRow {
	row := func(label string, x rememberRow) tableRow {
		return tableRow{label, []pair{{"payments", x.Payments}, {"late duplicates", x.Late}, {"charges", x.Charges}}, x.effects}
	}
	return []tableRow{
		row("claims kept 1 hour", r.Short),
		row("claims kept past queue retention", r.PastRetention),
	}
}

// runRemember runs experiment 6: opts.Payments payments are delivered and
// charged under the full claim-first protocol; then, two hours later on the
// store's clock, 1 in 20 (exactly opts.Payments/20, chosen by opts.Seed) is
// delivered again, as a producer's retry or a redrive can be. The provider
// (in process, on the same clock) ignores idempotency keys, so the charges
// count what the claims did alone. The rows differ only in how long a claim
// is kept.
func runRemember(ctx context.Context, opts Options) (rememberResult, error) {
	if err := opts.setDefaults(); err != nil {
		return rememberResult{}, err
	}
	ps := payments(opts.Payments, opts.Seed)
	late := choose(ps, redeliverEvery, opts.Seed, saltRemember)
	first := messages(ps, nil)
	var again []message
	for _, m := range first {
		if late[m.payment.PaymentID] {
			again = append(again, m)
		}
	}
	run := func(id, label string, keep time.Duration) (rememberRow, error) {
		c := &clock{}
		store, err := opts.NewStore(ctx, opts.namespace(id), c.Now)
		if err != nil {
			return rememberRow{}, fmt.Errorf("%s: claim store: %w", label, err)
		}
		prov := newForgetfulProvider(c.Now, 0)
		var dups atomic.Int64
		h := keyedHandler(store, prov, c, keep, false, &dups)
		b := &broker{workers: opts.Workers, clock: c, progress: opts.progress}
		opts.progress.row(label, len(first))
		if _, err := b.run(ctx, first, h); err != nil {
			return rememberRow{}, fmt.Errorf("%s: %w", label, err)
		}
		c.Advance(lateBy)
		opts.progress.row(label+", late duplicates", len(again))
		bs, err := b.run(ctx, again, h)
		if err != nil {
			return rememberRow{}, fmt.Errorf("%s: late duplicates: %w", label, err)
		}
		prov.mu.Lock()
		charges := prov.stats.charges
		prov.mu.Unlock()
		return rememberRow{
			Payments: len(ps), Late: bs.Copies, Charges: charges, Duplicates: int(dups.Load()),
			effects: countEffects(paymentIDs(ps), prov.chargesByPayment()),
		}, nil
	}
	var res rememberResult
	var err error
	if res.Short, err = run("remember-hour", "claims kept 1 hour", shortKeep); err != nil {
		return res, err
	}
	res.PastRetention, err = run("remember-retention", "claims kept past queue retention", retention)
	return res, err
}
