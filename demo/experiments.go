package demo

import (
	"context"
	"time"

	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// Fault rates: 1 in redeliverEvery payments is delivered twice in experiment
// 1; 1 in faultEvery is faulty in experiments 2 to 4.
const (
	redeliverEvery = 20
	faultEvery     = 50
)

// chargeLatency is how long the fake provider takes to charge in experiment
// 1: the window in which a duplicate races the first copy.
const chargeLatency = time.Millisecond

// Salts that make each experiment choose its own payments from one seed.
const (
	saltRace uint64 = iota + 1
	saltRelease
	saltLease
	saltKey
	saltNatural
	saltRemember
	saltLedger
	saltForget
	saltKafka
)

// oneAttempt is a client that reports a failed attempt to the handler at once,
// as it does when its retry budget runs out, so that the redelivery decides.
var oneAttempt = provider.Config{Timeout: 10 * time.Second, MaxAttempts: 1}

// Experiment 4's timing: the provider charges, then holds its answer back
// for slowAnswer; the client gives up on an attempt after attemptTimeout
// (Options can make it longer, for loaded test machines: an ordinary charge
// that outlasts it is a timeout too) and retries with backoff.
const (
	attemptTimeout = 200 * time.Millisecond
	slowAnswer     = 5 * time.Second
)

func retryingClient(timeout time.Duration) provider.Config {
	return provider.Config{
		Timeout:     timeout,
		MaxAttempts: 8,
		MinBackoff:  20 * time.Millisecond,
		MaxBackoff:  100 * time.Millisecond,
	}
}

// raceResult is what experiment 1 measured: a duplicate delivered while the
// first copy is still being charged, under three handlers.
type raceResult struct {
	// NoDedup charges every delivery.
	NoDedup raceRow
	// CheckThenAct looks the key up, charges, then remembers the key.
	CheckThenAct raceRow
	// ClaimFirst claims the key in the claim store and charges only if it won.
	ClaimFirst raceRow
}

// raceRow is one handler's numbers in experiment 1.
type raceRow struct {
	// Deliveries counts the copies the broker delivered: every payment once,
	// the redelivered ones twice.
	Deliveries int
	// Receives counts handler calls, including copies deferred because the
	// key was held elsewhere and received again later.
	Receives int
	// Payments is the number of distinct payments.
	Payments int
	// Charges is the number of charges the provider made.
	Charges int
	// effects counts the payments charged more than once, or never.
	effects
}

func (r raceResult) rows() []tableRow {
	row := func(label string, x raceRow) tableRow {
		return tableRow{label, []pair{{"deliveries", x.Deliveries}, {"payments", x.Payments}, {"charges", x.Charges}}, x.effects}
	}
	return []tableRow{
		row("no deduplication", r.NoDedup),
		row("check, charge, then remember", r.CheckThenAct),
		row("claim first, atomically", r.ClaimFirst),
	}
}

// runRace runs experiment 1: opts.Payments payments on opts.Workers workers,
// 1 in 20 delivered a second time as soon as the first copy is received;
// charging takes 1 ms. The provider ignores idempotency keys here, so the
// charges count what the handlers did alone.
func runRace(ctx context.Context, opts Options) (raceResult, error) {
	if err := opts.setDefaults(); err != nil {
		return raceResult{}, err
	}
	ps := payments(opts.Payments, opts.Seed)
	msgs := messages(ps, choose(ps, redeliverEvery, opts.Seed, saltRace))
	fake := fakeprovider.Config{Latency: chargeLatency, IgnoreKeys: true}
	run := func(id, label string, claims bool, h func(*row) handler) (raceRow, error) {
		spec := rowSpec{id: id, label: label, fake: fake, client: oneAttempt, claims: claims}
		_, bs, st, err := runRow(ctx, opts, spec, msgs, h)
		return raceRow{
			Deliveries: bs.Copies, Receives: bs.Receives, Payments: len(ps), Charges: int(st.Charges),
			effects: countEffects(paymentIDs(ps), st.ChargesByPayment),
		}, err
	}
	var res raceResult
	var err error
	if res.NoDedup, err = run("race-none", "no deduplication", false, (*row).noDedup); err != nil {
		return res, err
	}
	if res.CheckThenAct, err = run("race-check", "check, charge, then remember", false, (*row).checkThenAct); err != nil {
		return res, err
	}
	res.ClaimFirst, err = run("race-claim", "claim first, atomically", true, func(r *row) handler {
		return r.claimFirst(claimPolicy{lease: visibilityTimeout - leaseMargin, release: true, deferHeld: true})
	})
	return res, err
}

// releaseResult is what experiment 2 measured: the provider fails the first
// attempt of 1 in 50 payments, and the broker redelivers them.
type releaseResult struct {
	// ClaimThenCharge keeps its claim when the charge fails, and treats a
	// claimed key as done.
	ClaimThenCharge releaseRow
	// ReleaseOnFailure releases the claim when the charge fails.
	ReleaseOnFailure releaseRow
}

// releaseRow is one handler's numbers in experiment 2.
type releaseRow struct {
	// Payments is the number of distinct payments.
	Payments int
	// FailedFirst counts the first attempts the provider failed (without
	// charging).
	FailedFirst int
	// Charges is the number of charges the provider made.
	Charges int
	// Skipped counts redeliveries acked without charging because the key
	// was claimed.
	Skipped int
	// Takeovers counts claims acquired over an earlier holder's claim.
	Takeovers int
	// effects counts the payments charged more than once, or never.
	effects
}

func (r releaseResult) rows() []tableRow {
	row := func(label string, x releaseRow) tableRow {
		return tableRow{label, []pair{{"payments", x.Payments}, {"first attempts failed", x.FailedFirst}, {"charges", x.Charges}}, x.effects}
	}
	return []tableRow{
		row("claim, then charge", r.ClaimThenCharge),
		row("claim, charge, release on failure", r.ReleaseOnFailure),
	}
}

// runRelease runs experiment 2: 1 in 50 payments (exactly opts.Payments/50,
// chosen by opts.Seed) fail their first attempt at the provider without
// being charged; the handler does not ack them and the broker redelivers
// them after the visibility timeout. Both handlers claim without a lease;
// they differ only in releasing the claim on failure.
func runRelease(ctx context.Context, opts Options) (releaseResult, error) {
	if err := opts.setDefaults(); err != nil {
		return releaseResult{}, err
	}
	ps := payments(opts.Payments, opts.Seed)
	failing := choose(ps, faultEvery, opts.Seed, saltRelease)
	fake := fakeprovider.Config{
		IgnoreKeys: true,
		FailFirst:  func(_ string, p provider.Payment) bool { return failing[p.PaymentID] },
	}
	msgs := messages(ps, nil)
	run := func(id, label string, release bool) (releaseRow, error) {
		spec := rowSpec{id: id, label: label, fake: fake, client: oneAttempt, claims: true}
		r, _, st, err := runRow(ctx, opts, spec, msgs, func(r *row) handler {
			return r.claimFirst(claimPolicy{release: release})
		})
		if err != nil {
			return releaseRow{}, err
		}
		return releaseRow{
			Payments: len(ps), FailedFirst: int(st.Faults), Charges: int(st.Charges),
			Skipped: int(r.skipped.Load()), Takeovers: int(r.takeovers.Load()),
			effects: countEffects(paymentIDs(ps), st.ChargesByPayment),
		}, nil
	}
	var res releaseResult
	var err error
	if res.ClaimThenCharge, err = run("release-keep", "claim, then charge", false); err != nil {
		return res, err
	}
	res.ReleaseOnFailure, err = run("release-release", "claim, charge, release on failure", true)
	return res, err
}

// leaseResult is what experiment 3 measured: workers die between claim and
// charge, and the broker redelivers after the visibility timeout.
type leaseResult struct {
	// WithoutLease claims until the claim expires (days).
	WithoutLease leaseRow
	// WithLease claims with a lease that ends with the visibility timeout.
	WithLease leaseRow
}

// leaseRow is one handler's numbers in experiment 3.
type leaseRow struct {
	// Payments is the number of distinct payments.
	Payments int
	// Crashed counts the workers that died after claiming, before charging.
	Crashed int
	// Charges is the number of charges the provider made.
	Charges int
	// Takeovers counts claims acquired over a dead holder's claim (token 2).
	Takeovers int
	// DeadLettered counts the messages the broker gave up on after
	// maxReceives receives.
	DeadLettered int
	// effects counts the payments charged more than once, or never.
	effects
}

func (r leaseResult) rows() []tableRow {
	row := func(label string, x leaseRow) tableRow {
		return tableRow{label, []pair{{"payments", x.Payments}, {"crashed", x.Crashed}, {"charges", x.Charges}}, x.effects}
	}
	return []tableRow{
		row("claim without lease", r.WithoutLease),
		row("claim with lease", r.WithLease),
	}
}

// runLease runs experiment 3: for 1 in 50 payments (exactly opts.Payments/50,
// chosen by opts.Seed) the worker dies right after its first claim, so
// neither charge nor release runs and the message is not acked. The broker
// redelivers it after the visibility timeout, by which time a lease aligned
// with the visibility timeout has expired. Both handlers release on failure
// and defer a key held elsewhere, as the protocol does.
func runLease(ctx context.Context, opts Options) (leaseResult, error) {
	if err := opts.setDefaults(); err != nil {
		return leaseResult{}, err
	}
	ps := payments(opts.Payments, opts.Seed)
	dying := choose(ps, faultEvery, opts.Seed, saltLease)
	crash := func(m message) bool { return m.receives == 1 && dying[m.payment.PaymentID] }
	fake := fakeprovider.Config{IgnoreKeys: true}
	msgs := messages(ps, nil)
	run := func(id, label string, lease time.Duration) (leaseRow, error) {
		spec := rowSpec{id: id, label: label, fake: fake, client: oneAttempt, claims: true}
		r, bs, st, err := runRow(ctx, opts, spec, msgs, func(r *row) handler {
			return r.claimFirst(claimPolicy{lease: lease, release: true, deferHeld: true, crash: crash})
		})
		if err != nil {
			return leaseRow{}, err
		}
		return leaseRow{
			Payments: len(ps), Crashed: int(r.crashed.Load()), Charges: int(st.Charges),
			Takeovers: int(r.takeovers.Load()), DeadLettered: bs.DeadLettered,
			effects: countEffects(paymentIDs(ps), st.ChargesByPayment),
		}, nil
	}
	var res leaseResult
	var err error
	if res.WithoutLease, err = run("lease-none", "claim without lease", 0); err != nil {
		return res, err
	}
	res.WithLease, err = run("lease-aligned", "claim with lease", visibilityTimeout-leaseMargin)
	return res, err
}

// keyResult is what experiment 4 measured: the provider charges and its
// answer times out, and the client retries.
type keyResult struct {
	// WithoutKey retries at a provider that ignores the idempotency key, as
	// one does when the key is not forwarded.
	WithoutKey keyRow
	// WithKey retries with the same key at a provider that honours it.
	WithKey keyRow
}

// keyRow is one setup's numbers in experiment 4.
type keyRow struct {
	// Payments is the number of distinct payments.
	Payments int
	// Timeouts counts the charges whose answer the provider delayed past the
	// client's timeout.
	Timeouts int
	// Charges is the number of charges the provider made.
	Charges int
	// Calls counts the charge requests the provider received.
	Calls int
	// Replays counts answers the provider replayed for a repeated key.
	Replays int
	// effects counts the payments charged more than once, or never.
	effects
}

func (r keyResult) rows() []tableRow {
	row := func(label string, x keyRow) tableRow {
		return tableRow{label, []pair{{"payments", x.Payments}, {"timeouts", x.Timeouts}, {"charges", x.Charges}}, x.effects}
	}
	return []tableRow{
		row("retry without key", r.WithoutKey),
		row("retry with idempotency key", r.WithKey),
	}
}

// runKey runs experiment 4: for 1 in 50 payments (exactly opts.Payments/50,
// chosen by opts.Seed) the provider charges on the first attempt and holds
// its answer back; the client gives up on the attempt after 200 ms and
// retries with backoff. The handler is the full claim-first protocol; the
// rows differ only in whether the provider sees the key.
func runKey(ctx context.Context, opts Options) (keyResult, error) {
	if err := opts.setDefaults(); err != nil {
		return keyResult{}, err
	}
	ps := payments(opts.Payments, opts.Seed)
	slow := choose(ps, faultEvery, opts.Seed, saltKey)
	msgs := messages(ps, nil)
	run := func(id, label string, ignoreKeys bool) (keyRow, error) {
		fake := fakeprovider.Config{
			IgnoreKeys:   ignoreKeys,
			TimeoutDelay: slowAnswer,
			TimeoutFirst: func(_ string, p provider.Payment) bool { return slow[p.PaymentID] },
		}
		spec := rowSpec{id: id, label: label, fake: fake, client: retryingClient(opts.attemptTimeout), claims: true}
		_, _, st, err := runRow(ctx, opts, spec, msgs, func(r *row) handler {
			return r.claimFirst(claimPolicy{lease: visibilityTimeout - leaseMargin, release: true, deferHeld: true})
		})
		if err != nil {
			return keyRow{}, err
		}
		return keyRow{
			Payments: len(ps), Timeouts: int(st.Faults), Charges: int(st.Charges),
			Calls: int(st.Calls), Replays: int(st.Replays),
			effects: countEffects(paymentIDs(ps), st.ChargesByPayment),
		}, nil
	}
	var res keyResult
	var err error
	if res.WithoutKey, err = run("key-none", "retry without key", true); err != nil {
		return res, err
	}
	res.WithKey, err = run("key-forwarded", "retry with idempotency key", false)
	return res, err
}
