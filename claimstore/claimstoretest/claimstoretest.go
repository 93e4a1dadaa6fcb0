// Package claimstoretest is the conformance suite of the claim protocol: the
// behaviour every claimstore.Store must have, written once and run against
// each backend (memory, DynamoDB and PostgreSQL in this module, and the cache
// in front of them; any other from a user's). Each behaviour is a named
// function (testFirstClaim, testStaleTokenRejected, ...), run by Run as a
// subtest of the same name in snake case.
//
//	func TestConformance(t *testing.T) {
//		claimstoretest.Run(t, "mystore", func(t *testing.T, clock *claimstoretest.Clock) claimstore.Store {
//			return mystore.New(mystore.Config{Now: clock.Now})
//		})
//	}
package claimstoretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
)

// Clock is a settable clock for stores under test: leases and expiry are
// judged by the store's clock, so the suite moves time instead of sleeping.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock at the current time.
func NewClock() *Clock { return &Clock{t: time.Now()} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Factory returns a store whose clock is clock.Now. Stores from one Factory
// may share state (one table): the suite uses a fresh key in every case.
type Factory func(t *testing.T, clock *Clock) claimstore.Store

// Options tune the suite for a backend.
type Options struct {
	// KeyPrefix is the prefix the Factory's stores use; the suite needs it to
	// build a key that is just too long. Defaults to "".
	KeyPrefix string
	// RaceRounds is how many times 16 goroutines race for one key. Defaults to 50.
	RaceRounds int
	// Prefixed returns a store of the backend with the given key prefix
	// that shares the Factory's state (the same table), for the case that
	// keys of different prefixes never meet. Required.
	Prefixed func(t *testing.T, clock *Clock, prefix string) claimstore.Store
}

const (
	lease     = 30 * time.Second
	retention = time.Hour
)

// Run runs every conformance behaviour against the store newStore returns,
// as parallel subtests of t named backend/behaviour.
func Run(t *testing.T, backend string, newStore Factory, opts Options) {
	t.Helper()
	if opts.RaceRounds == 0 {
		opts.RaceRounds = 50
	}
	t.Run(backend, func(t *testing.T) {
		for _, b := range append(protocolBehaviours(), adminBehaviours()...) {
			t.Run(b.name, func(t *testing.T) {
				t.Parallel()
				clock := NewClock()
				h := &harness{t: t, s: newStore(t, clock), clock: clock, opts: opts}
				b.test(h, newKey(t))
			})
		}
	})
}

// A behaviour is one thing every store must do: a named test function, run
// with a fresh store, clock and key.
type behaviour struct {
	name string
	test func(h *harness, key string)
}

// protocolBehaviours are the claim protocol's: acquire, renew, complete,
// release and their fencing, limits and races.
func protocolBehaviours() []behaviour {
	return []behaviour{
		{"first_claim", testFirstClaim},
		{"duplicate_after_completion_returns_result", testDuplicateAfterCompletionReturnsResult},
		{"held_elsewhere_while_lease_lives", testHeldElsewhereWhileLeaseLives},
		{"takeover_after_lease_expiry", testTakeoverAfterLeaseExpiry},
		{"takeover_after_release", testTakeoverAfterRelease},
		{"renew_writes_last_error", testRenewWritesLastError},
		{"renew_extends_the_lease", testRenewExtendsTheLease},
		{"stale_token_rejected", testStaleTokenRejected},
		{"finished_claim_rejects_holder_writes", testFinishedClaimRejectsHolderWrites},
		{"unknown_key_rejects_holder_writes", testUnknownKeyRejectsHolderWrites},
		{"expired_row_counts_as_absent", testExpiredRowCountsAsAbsent},
		{"tokens_increase_with_every_acquisition", testTokensIncreaseWithEveryAcquisition},
		{"invalid_keys_rejected", testInvalidKeysRejected},
		{"invalid_utf8_keys_rejected", testInvalidUTF8KeysRejected},
		{"invalid_params_rejected", testInvalidParamsRejected},
		{"own_applied_acquire_recognized", testOwnAppliedAcquireRecognized},
		{"own_applied_takeover_recognized", testOwnAppliedTakeoverRecognized},
		{"own_acq_after_release_takes_over", testOwnAcqAfterReleaseTakesOver},
		{"applied_then_retried_complete_is_success", testAppliedThenRetriedCompleteIsSuccess},
		{"applied_then_retried_release_is_success", testAppliedThenRetriedReleaseIsSuccess},
		{"acq_is_new_per_acquisition", testAcqIsNewPerAcquisition},
		{"reused_token_with_another_acq_rejected", testReusedTokenWithAnotherAcqRejected},
		{"fingerprint_mismatch_on_completed_claim", testFingerprintMismatchOnCompletedClaim},
		{"fingerprint_mismatch_on_in_progress_claim", testFingerprintMismatchOnInProgressClaim},
		{"row_without_fingerprint_matches", testRowWithoutFingerprintMatches},
		{"takeover_keeps_first_at", testTakeoverKeepsFirstAt},
		{"takeover_of_expired_released_row_keeps_first_at", testTakeoverOfExpiredReleasedRowKeepsFirstAt},
		{"prefixes_never_meet", testPrefixesNeverMeet},
		{"result_too_large_is_refused_and_nothing_written", testResultTooLargeIsRefusedAndNothingWritten},
		{"result_at_the_limit_is_stored", testResultAtTheLimitIsStored},
		{"renew_moves_expiry_past_the_lease", testRenewMovesExpiryPastTheLease},
		{"racing_acquirers_one_winner", testRacingAcquirersOneWinner},
		{"racing_takeover_one_winner", testRacingTakeoverOneWinner},
	}
}

func testFirstClaim(h *harness, key string) {
	a := h.acquire(key, "w1")
	h.wantOutcome(a, claimstore.Acquired)
	c := a.Claim
	if c.Token != 1 || c.Attempts != 1 || c.Status != claimstore.StatusInProgress || c.Owner != "w1" || c.Key != key {
		h.t.Fatalf("first claim = %+v, want token 1, attempts 1, IN_PROGRESS, owner w1, key %q", c, key)
	}
	if want := h.clock.Now().Add(lease).UnixMilli(); c.LeaseUntil.UnixMilli() != want {
		h.t.Errorf("LeaseUntil = %d ms, want %d", c.LeaseUntil.UnixMilli(), want)
	}
	if want := claimstore.ExpirySeconds(h.clock.Now().Add(retention)); c.ExpiresAt.Unix() != want {
		h.t.Errorf("ExpiresAt = %d s, want %d", c.ExpiresAt.Unix(), want)
	}
	got := h.get(key)
	if got.Token != 1 || got.Status != claimstore.StatusInProgress || got.Owner != "w1" {
		h.t.Errorf("Get after first claim = %+v", got)
	}
}

func testDuplicateAfterCompletionReturnsResult(h *harness, key string) {
	a := h.acquire(key, "w1")
	h.complete(a.Claim, "ch_123")
	d := h.acquire(key, "w2")
	h.wantOutcome(d, claimstore.Duplicate)
	if d.Claim.Result != "ch_123" || d.Claim.Token != 1 || d.Claim.Status != claimstore.StatusCompleted {
		h.t.Fatalf("duplicate claim = %+v, want result ch_123, token 1, COMPLETED", d.Claim)
	}
	h.clock.Advance(2 * lease) // a completed claim has no lease to expire
	h.wantOutcome(h.acquire(key, "w3"), claimstore.Duplicate)
}

func testHeldElsewhereWhileLeaseLives(h *harness, key string) {
	a := h.acquire(key, "w1")
	h.clock.Advance(lease - time.Second)
	b := h.acquire(key, "w2")
	h.wantOutcome(b, claimstore.HeldElsewhere)
	if !b.Claim.LeaseUntil.Equal(a.Claim.LeaseUntil) || b.Claim.Owner != "w1" || b.Claim.Token != 1 {
		h.t.Fatalf("held claim = %+v, want the holder's lease %v, owner w1, token 1", b.Claim, a.Claim.LeaseUntil)
	}
}

func testTakeoverAfterLeaseExpiry(h *harness, key string) {
	h.acquire(key, "w1")
	h.clock.Advance(lease)
	b := h.acquire(key, "w2")
	h.wantOutcome(b, claimstore.Acquired)
	if b.Claim.Token != 2 || b.Claim.Attempts != 2 || b.Claim.Owner != "w2" {
		h.t.Fatalf("takeover claim = %+v, want token 2, attempts 2, owner w2", b.Claim)
	}
	h.wantPrevious(b, claimstore.StatusInProgress)
}

// wantPrevious checks a takeover's Previous, if the store gives it: the
// row taken over, w1's with token 1 and status.
func (h *harness) wantPrevious(a claimstore.Acquisition, status claimstore.Status) {
	h.t.Helper()
	if p := a.Previous; p != nil && (p.Owner != "w1" || p.Token != 1 || p.Status != status) {
		h.t.Fatalf("takeover's Previous = %+v, want w1's row, token 1, %s", *p, status)
	}
}

func testTakeoverAfterRelease(h *harness, key string) {
	a := h.acquire(key, "w1")
	h.release(a.Claim, "")
	if got := h.get(key); got.Status != claimstore.StatusReleased || got.Token != 1 {
		h.t.Fatalf("after release = %+v, want RELEASED with token 1 kept", got)
	}
	b := h.acquire(key, "w2")
	h.wantOutcome(b, claimstore.Acquired)
	if b.Claim.Token != 2 {
		h.t.Fatalf("token after release and takeover = %d, want 2", b.Claim.Token)
	}
	h.wantPrevious(b, claimstore.StatusReleased)
}

func testRenewWritesLastError(h *harness, key string) {
	a := h.acquire(key, "w1")
	renew := func(lastErr string) {
		h.t.Helper()
		if err := h.s.Renew(context.Background(), claimstore.RenewParams{Holder: a.Claim.Holder(),
			LeaseUntil: h.clock.Now().Add(lease), ExpiresAt: h.clock.Now().Add(retention), LastError: lastErr}); err != nil {
			h.t.Fatalf("Renew: %v", err)
		}
	}
	renew("provider unavailable: HTTP 503")
	renew("")
	if got := h.get(key); got.Status != claimstore.StatusInProgress || got.LastError != "provider unavailable: HTTP 503" {
		h.t.Fatalf("after renewals with and without LastError = %+v, want IN_PROGRESS with the last error kept", got)
	}
}

func testRenewExtendsTheLease(h *harness, key string) {
	a := h.acquire(key, "w1")
	newLease := h.clock.Now().Add(3 * lease)
	if err := h.s.Renew(context.Background(), claimstore.RenewParams{Holder: a.Claim.Holder(), LeaseUntil: newLease, ExpiresAt: h.clock.Now().Add(retention)}); err != nil {
		h.t.Fatalf("Renew: %v", err)
	}
	h.clock.Advance(2 * lease)
	b := h.acquire(key, "w2")
	h.wantOutcome(b, claimstore.HeldElsewhere)
	if b.Claim.LeaseUntil.UnixMilli() != newLease.UnixMilli() {
		h.t.Fatalf("LeaseUntil = %v, want the renewed %v", b.Claim.LeaseUntil, newLease)
	}
}

func testStaleTokenRejected(h *harness, key string) {
	old := h.acquire(key, "w1")
	h.clock.Advance(lease + time.Millisecond)
	cur := h.acquire(key, "w2")
	h.wantOutcome(cur, claimstore.Acquired)
	before := h.get(key)
	h.wantHolderWritesLost(old.Claim.Holder(), "stale holder")
	if after := h.get(key); after != before {
		h.t.Fatalf("stale writes changed the claim:\nbefore %+v\nafter  %+v", before, after)
	}
	h.complete(cur.Claim, "ok") // the current holder is unaffected
}

func testFinishedClaimRejectsHolderWrites(h *harness, key string) {
	a := h.acquire(key, "w1")
	h.complete(a.Claim, "done")
	ctx := context.Background()
	if err := h.s.Renew(ctx, h.renewParams(a.Claim.Holder(), lease)); !errors.Is(err, claimstore.ErrLeaseLost) {
		h.t.Errorf("renew after complete: err = %v, want ErrLeaseLost", err)
	}
	if err := h.s.Release(ctx, claimstore.ReleaseParams{Holder: a.Claim.Holder()}); !errors.Is(err, claimstore.ErrLeaseLost) {
		h.t.Errorf("release after complete: err = %v, want ErrLeaseLost", err)
	}
	// A second Complete with the same holder is its own retry (success,
	// tested below); another holder's is rejected.
	other := a.Claim.Holder()
	other.Acq = claimstore.NewAcq()
	if err := h.s.Complete(ctx, claimstore.CompleteParams{Holder: other, Result: "again", ExpiresAt: h.clock.Now().Add(retention)}); !errors.Is(err, claimstore.ErrLeaseLost) {
		h.t.Errorf("complete by another acquisition: err = %v, want ErrLeaseLost", err)
	}
	if got := h.get(key); got.Result != "done" || got.Status != claimstore.StatusCompleted {
		h.t.Fatalf("claim = %+v, want COMPLETED with result done", got)
	}
}

func testUnknownKeyRejectsHolderWrites(h *harness, key string) {
	h.wantHolderWritesLost(claimstore.Holder{Key: key, Token: 1, Acq: claimstore.NewAcq()}, "unknown key")
	if _, err := h.s.Get(context.Background(), key); !errors.Is(err, claimstore.ErrNotFound) {
		h.t.Errorf("Get of unknown key: err = %v, want ErrNotFound", err)
	}
}

func testExpiredRowCountsAsAbsent(h *harness, key string) {
	a := h.acquire(key, "w1")
	if err := h.s.Complete(context.Background(), claimstore.CompleteParams{
		Holder: a.Claim.Holder(), Result: "old", ExpiresAt: h.clock.Now().Add(2 * time.Second),
	}); err != nil {
		h.t.Fatalf("Complete: %v", err)
	}
	h.clock.Advance(3 * time.Second)
	if _, err := h.s.Get(context.Background(), key); !errors.Is(err, claimstore.ErrNotFound) {
		h.t.Fatalf("Get of expired row: err = %v, want ErrNotFound", err)
	}
	b := h.acquire(key, "w2")
	h.wantOutcome(b, claimstore.Acquired)
	if b.Claim.Token != 2 || b.Claim.Result != "" {
		h.t.Fatalf("claim after expiry = %+v, want token 2 (monotonic) and no old result", b.Claim)
	}
}

func testTokensIncreaseWithEveryAcquisition(h *harness, key string) {
	for want := int64(1); want <= 5; want++ {
		a := h.acquire(key, "w")
		h.wantOutcome(a, claimstore.Acquired)
		if a.Claim.Token != want || a.Claim.Attempts != want {
			h.t.Fatalf("acquisition %d: token %d attempts %d", want, a.Claim.Token, a.Claim.Attempts)
		}
		if want%2 == 0 {
			h.clock.Advance(lease)
		} else {
			h.release(a.Claim, "")
		}
	}
}

func testInvalidKeysRejected(h *harness, key string) {
	justFits := key + strings.Repeat("k", claimstore.MaxKeyBytes-len(claimstore.StoredKey(h.opts.KeyPrefix, key)))
	long := justFits + "k"
	for name, k := range map[string]string{"empty": "", "too long": long, "with the key separator": key + "\x1f1"} {
		_, err := h.s.Acquire(context.Background(), h.params(k, "w"))
		if !errors.Is(err, claimstore.ErrInvalidKey) {
			h.t.Errorf("Acquire(%s key): err = %v, want ErrInvalidKey", name, err)
		}
	}
	h.wantOutcome(h.acquire(justFits, "w"), claimstore.Acquired)
}

func testInvalidUTF8KeysRejected(h *harness, key string) {
	// A store that turned bad bytes into U+FFFD would make these
	// one key: the second a duplicate of the first.
	for _, k := range []string{key + "\xff", key + "\xfe", key + "\xc3"} {
		if a, err := h.s.Acquire(context.Background(), h.params(k, "w")); !errors.Is(err, claimstore.ErrInvalidKey) {
			h.t.Errorf("Acquire(%q): %+v, err = %v, want ErrInvalidKey", k, a.Outcome, err)
		}
		if _, err := h.s.Get(context.Background(), k); !errors.Is(err, claimstore.ErrInvalidKey) {
			h.t.Errorf("Get(%q): err = %v, want ErrInvalidKey", k, err)
		}
	}
	h.wantOutcome(h.acquire(key+"\u00e9", "w"), claimstore.Acquired)
}

func testInvalidParamsRejected(h *harness, key string) {
	p := h.params(key, "w")
	p.LeaseUntil = h.clock.Now().Add(-time.Second)
	if _, err := h.s.Acquire(context.Background(), p); !errors.Is(err, claimstore.ErrInvalidParams) {
		h.t.Errorf("Acquire with a lease in the past: err = %v, want ErrInvalidParams", err)
	}
	if _, err := h.s.Get(context.Background(), key); !errors.Is(err, claimstore.ErrNotFound) {
		h.t.Errorf("a rejected Acquire wrote a row: Get err = %v", err)
	}
}

func testOwnAppliedAcquireRecognized(h *harness, key string) {
	// The first try was applied but its answer lost: the retry, with
	// the same Acq, finds its own row and holds the claim.
	p := h.params(key, "w1")
	p.Acq = claimstore.NewAcq()
	first := h.acquireWith(p)
	h.wantOutcome(first, claimstore.Acquired)
	h.clock.Advance(time.Second)
	again := h.acquireWith(p)
	h.wantOutcome(again, claimstore.Acquired)
	if again.Claim.Acq != p.Acq || again.Claim.Token != 1 || again.Claim.Attempts != 1 {
		h.t.Fatalf("retried acquire = %+v, want the first row (acq %s, token 1, attempts 1)", again.Claim, p.Acq)
	}
	h.complete(again.Claim, "ok")
}

func testOwnAppliedTakeoverRecognized(h *harness, key string) {
	h.release(h.acquire(key, "w1").Claim, "")
	p := h.params(key, "w2")
	p.Acq = claimstore.NewAcq()
	h.wantOutcome(h.acquireWith(p), claimstore.Acquired)
	again := h.acquireWith(p)
	h.wantOutcome(again, claimstore.Acquired)
	if again.Claim.Token != 2 || again.Claim.Acq != p.Acq {
		h.t.Fatalf("retried takeover = %+v, want token 2 with acq %s", again.Claim, p.Acq)
	}
}

func testOwnAcqAfterReleaseTakesOver(h *harness, key string) {
	// A caller that reuses its acq after its own release (a retry that
	// keeps one acq across calls) finds a released row, which any acquirer
	// takes over: a new token, its acq kept. The same holds for its own
	// completed row once past its expiry, which counts as absent.
	p := h.params(key, "w1")
	p.Acq = claimstore.NewAcq()
	first := h.acquireWith(p)
	h.wantOutcome(first, claimstore.Acquired)
	h.release(first.Claim, "transient")
	again := h.acquireWith(p)
	h.wantOutcome(again, claimstore.Acquired)
	if again.Claim.Token != 2 || again.Claim.Acq != p.Acq || again.Claim.Status != claimstore.StatusInProgress {
		h.t.Fatalf("acquire with its own acq after its release = %+v, want token 2, acq %s, in progress", again.Claim, p.Acq)
	}
	if !again.Claim.LeaseUntil.After(h.clock.Now()) {
		h.t.Fatalf("lease of the takeover ends at %v, want after now %v", again.Claim.LeaseUntil, h.clock.Now())
	}
	h.complete(again.Claim, "ok")
	h.clock.Advance(retention + time.Second)
	p = h.params(key, "w1")
	p.Acq = again.Claim.Acq
	third := h.acquireWith(p)
	h.wantOutcome(third, claimstore.Acquired)
	if third.Claim.Token != 3 || third.Claim.Acq != p.Acq || third.Claim.Result != "" {
		h.t.Fatalf("acquire with its own acq past the completed row's expiry = %+v, want token 3, acq %s, no result", third.Claim, p.Acq)
	}
}

func testAppliedThenRetriedCompleteIsSuccess(h *harness, key string) {
	a := h.acquire(key, "w1")
	h.complete(a.Claim, "ch_1")
	h.complete(a.Claim, "ch_1") // the retry of a write that was applied
	if got := h.get(key); got.Status != claimstore.StatusCompleted || got.Result != "ch_1" {
		h.t.Fatalf("claim = %+v, want COMPLETED ch_1", got)
	}
}

func testAppliedThenRetriedReleaseIsSuccess(h *harness, key string) {
	a := h.acquire(key, "w1")
	h.release(a.Claim, "provider: 503")
	h.release(a.Claim, "provider: 503")
	got := h.get(key)
	if got.Status != claimstore.StatusReleased || got.LastError != "provider: 503" {
		h.t.Fatalf("claim = %+v, want RELEASED with last error kept", got)
	}
	b := h.acquire(key, "w2")
	h.wantOutcome(b, claimstore.Acquired)
	// The first holder's late retry must not release the new holder.
	if err := h.s.Release(context.Background(), claimstore.ReleaseParams{Holder: a.Claim.Holder()}); !errors.Is(err, claimstore.ErrLeaseLost) {
		h.t.Fatalf("old holder's release after a takeover: err = %v, want ErrLeaseLost", err)
	}
}

func testAcqIsNewPerAcquisition(h *harness, key string) {
	a := h.acquire(key, "w1")
	h.release(a.Claim, "")
	b := h.acquire(key, "w1")
	if a.Claim.Acq == "" || b.Claim.Acq == "" || a.Claim.Acq == b.Claim.Acq {
		h.t.Fatalf("acq of two acquisitions: %q and %q, want two different non-empty ids", a.Claim.Acq, b.Claim.Acq)
	}
	if got := h.get(key); got.Acq != b.Claim.Acq {
		h.t.Fatalf("stored acq = %q, want the current holder's %q", got.Acq, b.Claim.Acq)
	}
}

func testReusedTokenWithAnotherAcqRejected(h *harness, key string) {
	a := h.acquire(key, "w1")
	impostor := a.Claim.Holder()
	impostor.Acq = claimstore.NewAcq() // the same token, another acquisition
	before := h.get(key)
	h.wantHolderWritesLost(impostor, "same token, another acq")
	if after := h.get(key); after != before {
		h.t.Fatalf("rejected writes changed the claim:\nbefore %+v\nafter  %+v", before, after)
	}
	h.complete(a.Claim, "ok")
}

func testFingerprintMismatchOnCompletedClaim(h *harness, key string) {
	p := h.params(key, "w1")
	p.Fingerprint = "fp-a"
	a := h.acquireWith(p)
	h.complete(a.Claim, "ch_1")
	p2 := h.params(key, "w2")
	p2.Fingerprint = "fp-b"
	r := h.acquireWith(p2)
	h.wantOutcome(r, claimstore.KeyReused)
	if r.Claim.Fingerprint != "fp-a" || r.Claim.Result != "ch_1" {
		h.t.Fatalf("key reused claim = %+v, want the stored fingerprint fp-a and result", r.Claim)
	}
	p2.Fingerprint = "fp-a"
	h.wantOutcome(h.acquireWith(p2), claimstore.Duplicate) // same payload: a plain duplicate
}

func testFingerprintMismatchOnInProgressClaim(h *harness, key string) {
	p := h.params(key, "w1")
	p.Fingerprint = "fp-a"
	a := h.acquireWith(p)
	before := h.get(key)
	p2 := h.params(key, "w2")
	p2.Fingerprint = "fp-b"
	h.wantOutcome(h.acquireWith(p2), claimstore.KeyReused)
	if after := h.get(key); after != before {
		h.t.Fatalf("key reuse disturbed the holder:\nbefore %+v\nafter  %+v", before, after)
	}
	h.complete(a.Claim, "ok")
}

func testRowWithoutFingerprintMatches(h *harness, key string) {
	a := h.acquire(key, "w1") // no fingerprint, as rows written before them
	h.complete(a.Claim, "ch_1")
	p := h.params(key, "w2")
	p.Fingerprint = "fp-new"
	h.wantOutcome(h.acquireWith(p), claimstore.Duplicate)
}

func testTakeoverKeepsFirstAt(h *harness, key string) {
	a := h.acquire(key, "w1")
	first := a.Claim.FirstAt
	if first.UnixMilli() != h.clock.Now().UnixMilli() {
		h.t.Fatalf("FirstAt = %v, want the acquisition time %v", first, h.clock.Now())
	}
	h.clock.Advance(lease)
	b := h.acquire(key, "w2")
	h.wantOutcome(b, claimstore.Acquired)
	h.release(b.Claim, "")
	h.clock.Advance(time.Minute)
	c := h.acquire(key, "w3")
	if !b.Claim.FirstAt.Equal(first) || !c.Claim.FirstAt.Equal(first) || !h.get(key).FirstAt.Equal(first) {
		h.t.Fatalf("FirstAt after takeovers = %v, %v, stored %v; want %v kept", b.Claim.FirstAt, c.Claim.FirstAt, h.get(key).FirstAt, first)
	}
}

func testTakeoverOfExpiredReleasedRowKeepsFirstAt(h *harness, key string) {
	// A holder released after a provider may have seen the key; its
	// row expired before the next delivery. The key's first use is
	// still that first acquisition.
	a := h.acquire(key, "w1")
	first := a.Claim.FirstAt
	h.release(a.Claim, "provider: timeout")
	h.clock.Advance(retention + time.Minute)
	b := h.acquire(key, "w2")
	h.wantOutcome(b, claimstore.Acquired)
	if !b.Claim.FirstAt.Equal(first) || !h.get(key).FirstAt.Equal(first) {
		h.t.Fatalf("FirstAt after taking over an expired released row = %v, stored %v; want the first use %v", b.Claim.FirstAt, h.get(key).FirstAt, first)
	}
}

func testPrefixesNeverMeet(h *harness, key string) {
	if h.opts.Prefixed == nil {
		h.t.Fatal("Options.Prefixed is required: it checks that keys of different prefixes never meet")
	}
	// Prefixes p and p+"out", keys "out1" and "1": without a
	// separator both are stored as p+"out1".
	p := "t" + key[len(key)-16:]
	short, long := h.opts.Prefixed(h.t, h.clock, p), h.opts.Prefixed(h.t, h.clock, p+"out")
	ctx := context.Background()
	a, err := short.Acquire(ctx, h.params("out1", "w1"))
	if err != nil || a.Outcome != claimstore.Acquired {
		h.t.Fatalf("Acquire(out1) with prefix %q = %v, %v; want Acquired", p, a.Outcome, err)
	}
	if err := short.Complete(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "pay", ExpiresAt: h.clock.Now().Add(retention)}); err != nil {
		h.t.Fatalf("Complete: %v", err)
	}
	b, err := long.Acquire(ctx, h.params("1", "w2"))
	if err != nil || b.Outcome != claimstore.Acquired || b.Claim.Token != 1 {
		h.t.Fatalf("Acquire(1) with prefix %q = %v %+v, %v; want Acquired with token 1, a key of its own", p+"out", b.Outcome, b.Claim, err)
	}
}

func testResultTooLargeIsRefusedAndNothingWritten(h *harness, key string) {
	a := h.acquire(key, "w1")
	before := h.get(key)
	big := strings.Repeat("r", claimstore.MaxResultBytes+1)
	err := h.s.Complete(context.Background(), claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: big, ExpiresAt: h.clock.Now().Add(retention)})
	if !errors.Is(err, claimstore.ErrResultTooLarge) {
		h.t.Fatalf("Complete with %d bytes: err = %v, want ErrResultTooLarge", len(big), err)
	}
	if after := h.get(key); after != before {
		h.t.Fatalf("refused Complete changed the row:\nbefore %+v\nafter  %+v", before, after)
	}
	// The holder completes with the marker instead; duplicates read it back.
	h.complete(a.Claim, claimstore.OmittedResult(big))
	d := h.acquire(key, "w2")
	h.wantOutcome(d, claimstore.Duplicate)
	size, _, ok := claimstore.ParseOmittedResult(d.Claim.Result)
	if !ok || size != len(big) {
		h.t.Fatalf("duplicate's result = %.60q, want the omitted-result marker with size %d", d.Claim.Result, len(big))
	}
}

func testResultAtTheLimitIsStored(h *harness, key string) {
	// The longest result with the longest other attributes still fits.
	p := h.params(key+strings.Repeat("k", claimstore.MaxKeyBytes-len(claimstore.StoredKey(h.opts.KeyPrefix, key))), strings.Repeat("o", claimstore.MaxOwnerBytes))
	p.Fingerprint = strings.Repeat("f", claimstore.MaxFingerprintBytes)
	a := h.acquireWith(p)
	h.release(a.Claim, strings.Repeat("e", claimstore.MaxLastErrorBytes))
	b := h.acquireWith(p)
	big := strings.Repeat("r", claimstore.MaxResultBytes)
	h.complete(b.Claim, big)
	if got := h.get(p.Key); got.Result != big {
		h.t.Fatalf("stored result is %d bytes, want %d", len(got.Result), len(big))
	}
}

func testRenewMovesExpiryPastTheLease(h *harness, key string) {
	p := h.params(key, "w1")
	p.ExpiresAt = p.LeaseUntil.Add(time.Second) // a retention barely longer than the lease
	a := h.acquireWith(p)
	long := h.clock.Now().Add(10 * lease)
	if err := h.s.Renew(context.Background(), claimstore.RenewParams{
		Holder: a.Claim.Holder(), LeaseUntil: long, ExpiresAt: p.ExpiresAt,
	}); err != nil {
		h.t.Fatalf("Renew: %v", err)
	}
	got := h.get(key)
	if got.ExpiresAt.Before(got.LeaseUntil) {
		h.t.Fatalf("after renew ExpiresAt %v is before LeaseUntil %v", got.ExpiresAt, got.LeaseUntil)
	}
	h.clock.Advance(5 * lease)
	h.wantOutcome(h.acquire(key, "w2"), claimstore.HeldElsewhere)
}

// race has n callers acquire key at once and returns what each got.
func (h *harness) race(key string, n int) ([]claimstore.Acquisition, []error) {
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]claimstore.Acquisition, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = h.s.Acquire(context.Background(), h.params(key, "racer"))
		})
	}
	close(start)
	wg.Wait()
	return results, errs
}

func testRacingAcquirersOneWinner(h *harness, key string) {
	const racers = 16
	for round := range h.opts.RaceRounds {
		k := fmt.Sprintf("%s-%d", key, round)
		results, errs := h.race(k, racers)
		winners := 0
		for i := range racers {
			if errs[i] != nil {
				h.t.Fatalf("round %d racer %d: %v", round, i, errs[i])
			}
			switch results[i].Outcome {
			case claimstore.Acquired:
				winners++
			case claimstore.HeldElsewhere:
			default:
				h.t.Fatalf("round %d racer %d: outcome %v", round, i, results[i].Outcome)
			}
		}
		if winners != 1 {
			h.t.Fatalf("round %d: %d of %d racers acquired the key, want exactly 1", round, winners, racers)
		}
	}
}

func testRacingTakeoverOneWinner(h *harness, key string) {
	const racers = 16
	h.release(h.acquire(key, "w0").Claim, "")
	results, errs := h.race(key, racers)
	winners := 0
	for i := range racers {
		if errs[i] != nil {
			h.t.Fatalf("racer %d: %v", i, errs[i])
		}
		if results[i].Outcome == claimstore.Acquired {
			winners++
			if results[i].Claim.Token != 2 {
				h.t.Errorf("winner's token = %d, want 2", results[i].Claim.Token)
			}
		}
	}
	if winners != 1 {
		h.t.Fatalf("%d of %d racers took the released claim over, want exactly 1", winners, racers)
	}
}

type harness struct {
	t     *testing.T
	s     claimstore.Store
	clock *Clock
	opts  Options
}

func (h *harness) params(key, owner string) claimstore.AcquireParams {
	now := h.clock.Now()
	return claimstore.AcquireParams{Key: key, Owner: owner, LeaseUntil: now.Add(lease), ExpiresAt: now.Add(retention)}
}

func (h *harness) acquire(key, owner string) claimstore.Acquisition {
	h.t.Helper()
	return h.acquireWith(h.params(key, owner))
}

func (h *harness) acquireWith(p claimstore.AcquireParams) claimstore.Acquisition {
	h.t.Helper()
	a, err := h.s.Acquire(context.Background(), p)
	if err != nil {
		h.t.Fatalf("Acquire(%q): %v", p.Key, err)
	}
	return a
}

func (h *harness) complete(c claimstore.Claim, result string) {
	h.t.Helper()
	err := h.s.Complete(context.Background(), claimstore.CompleteParams{
		Holder: c.Holder(), Result: result, ExpiresAt: h.clock.Now().Add(retention),
	})
	if err != nil {
		h.t.Fatalf("Complete(%q, token %d): %v", c.Key, c.Token, err)
	}
}

func (h *harness) release(c claimstore.Claim, lastError string) {
	h.t.Helper()
	if err := h.s.Release(context.Background(), claimstore.ReleaseParams{Holder: c.Holder(), LastError: lastError}); err != nil {
		h.t.Fatalf("Release(%q, token %d): %v", c.Key, c.Token, err)
	}
}

// renewParams renews hd's lease to d from now, the row kept for the retention.
func (h *harness) renewParams(hd claimstore.Holder, d time.Duration) claimstore.RenewParams {
	now := h.clock.Now()
	return claimstore.RenewParams{Holder: hd, LeaseUntil: now.Add(d), ExpiresAt: now.Add(retention)}
}

// wantHolderWritesLost checks that renew, complete and release by hd all
// fail with ErrLeaseLost.
func (h *harness) wantHolderWritesLost(hd claimstore.Holder, who string) {
	h.t.Helper()
	ctx := context.Background()
	ops := map[string]error{
		"renew":    h.s.Renew(ctx, h.renewParams(hd, 10*lease)),
		"complete": h.s.Complete(ctx, claimstore.CompleteParams{Holder: hd, Result: "late", ExpiresAt: h.clock.Now().Add(retention)}),
		"release":  h.s.Release(ctx, claimstore.ReleaseParams{Holder: hd, LastError: "late"}),
	}
	for op, err := range ops {
		if !errors.Is(err, claimstore.ErrLeaseLost) {
			h.t.Errorf("%s by %s: err = %v, want ErrLeaseLost", op, who, err)
		}
	}
}

func (h *harness) get(key string) claimstore.Claim {
	h.t.Helper()
	c, err := h.s.Get(context.Background(), key)
	if err != nil {
		h.t.Fatalf("Get(%q): %v", key, err)
	}
	return c
}

func (h *harness) wantOutcome(a claimstore.Acquisition, want claimstore.Outcome) {
	h.t.Helper()
	if a.Outcome != want {
		h.t.Fatalf("outcome = %v (claim %+v), want %v", a.Outcome, a.Claim, want)
	}
}

func newKey(t *testing.T) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return strings.ReplaceAll(t.Name(), "/", ".") + "-" + hex.EncodeToString(b[:])
}
