package claimstoretest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
)

// adminBehaviours hold a store that implements claimstore.Admin to its contract;
// for a store that does not, they are skipped.
func adminBehaviours() []behaviour {
	return []behaviour{
		{"admin_force_release_lets_the_next_delivery_take_over", testAdminForceReleaseLetsTheNextDeliveryTakeOver},
		{"admin_force_release_is_not_the_holders_own_release", testAdminForceReleaseIsNotTheHoldersOwnRelease},
		{"admin_retried_acquire_after_force_release_takes_over", testAdminRetriedAcquireAfterForceReleaseTakesOver},
		{"admin_force_release_refuses_other_states", testAdminForceReleaseRefusesOtherStates},
		{"admin_force_complete_makes_later_deliveries_duplicates", testAdminForceCompleteMakesLaterDeliveriesDuplicates},
		{"admin_force_complete_refuses", testAdminForceCompleteRefuses},
		{"admin_forget_lets_the_key_run_again", testAdminForgetLetsTheKeyRunAgain},
		{"admin_expired_row_counts_as_absent", testAdminExpiredRowCountsAsAbsent},
		{"admin_concurrent_force_release_changes_once", testAdminConcurrentForceReleaseChangesOnce},
	}
}

func testAdminForceReleaseLetsTheNextDeliveryTakeOver(h *harness, key string) {
	ad := h.admin()
	a := h.acquire(key, "w1")
	before, err := ad.ForceRelease(context.Background(), key)
	if err != nil {
		h.t.Fatalf("ForceRelease: %v", err)
	}
	if before.Status != claimstore.StatusInProgress || before.Token != 1 || before.Acq != a.Claim.Acq {
		h.t.Fatalf("ForceRelease returned %+v, want the in-progress row with token 1", before)
	}
	if got := h.get(key); got.Status != claimstore.StatusReleased || got.Token != 1 || got.Acq == a.Claim.Acq || got.Acq == "" {
		h.t.Fatalf("after ForceRelease = %+v, want RELEASED, token 1 kept and a new acq (not %s)", got, a.Claim.Acq)
	}
	// The lease has not ended, yet the next acquire takes over.
	b := h.acquire(key, "w2")
	h.wantOutcome(b, claimstore.Acquired)
	if b.Claim.Token != 2 {
		h.t.Fatalf("token after forced release and takeover = %d, want 2", b.Claim.Token)
	}
	h.wantHolderWritesLost(a.Claim.Holder(), "the force-released holder")
}

func testAdminForceReleaseIsNotTheHoldersOwnRelease(h *harness, key string) {
	// The holder's release after an operator's: its own write would
	// have left the row RELEASED too, but the row is the operator's.
	ad := h.admin()
	a := h.acquire(key, "w1")
	if _, err := ad.ForceRelease(context.Background(), key); err != nil {
		h.t.Fatalf("ForceRelease: %v", err)
	}
	err := h.s.Release(context.Background(), claimstore.ReleaseParams{Holder: a.Claim.Holder(), LastError: "late"})
	if !errors.Is(err, claimstore.ErrLeaseLost) {
		h.t.Fatalf("holder's release after a forced release: err = %v, want ErrLeaseLost", err)
	}
}

func testAdminRetriedAcquireAfterForceReleaseTakesOver(h *harness, key string) {
	// An acquire applied, its answer lost, the claim force-released by
	// an operator, then the acquire retried with the same Acq: the row
	// is no longer the caller's own, and the retry takes it over.
	ad := h.admin()
	p := h.params(key, "w1")
	p.Acq = claimstore.NewAcq()
	h.wantOutcome(h.acquireWith(p), claimstore.Acquired)
	if _, err := ad.ForceRelease(context.Background(), key); err != nil {
		h.t.Fatalf("ForceRelease: %v", err)
	}
	again := h.acquireWith(p)
	h.wantOutcome(again, claimstore.Acquired)
	if again.Claim.Token != 2 || again.Claim.Status != claimstore.StatusInProgress {
		h.t.Fatalf("retried acquire after a forced release = %+v, want a takeover: token 2, IN_PROGRESS", again.Claim)
	}
	if got := h.get(key); got.Status != claimstore.StatusInProgress || got.Token != 2 || got.Acq != p.Acq {
		h.t.Fatalf("row after the retried acquire = %+v, want IN_PROGRESS, token 2, acq %s", got, p.Acq)
	}
	h.complete(again.Claim, "ok")
}

func testAdminForceReleaseRefusesOtherStates(h *harness, key string) {
	ad := h.admin()
	ctx := context.Background()
	if _, err := ad.ForceRelease(ctx, key); !errors.Is(err, claimstore.ErrNotFound) {
		h.t.Errorf("ForceRelease of an absent key: err = %v, want ErrNotFound", err)
	}
	a := h.acquire(key, "w1")
	h.release(a.Claim, "boom")
	if _, err := ad.ForceRelease(ctx, key); !errors.Is(err, claimstore.ErrWrongState) {
		h.t.Errorf("ForceRelease of a released claim: err = %v, want ErrWrongState", err)
	}
	b := h.acquire(key, "w2")
	h.complete(b.Claim, "ch_1")
	before := h.get(key)
	got, err := ad.ForceRelease(ctx, key)
	if !errors.Is(err, claimstore.ErrWrongState) || got.Status != claimstore.StatusCompleted {
		h.t.Errorf("ForceRelease of a completed claim = %+v, %v; want the row and ErrWrongState", got, err)
	}
	if after := h.get(key); after != before {
		h.t.Fatalf("refused ForceRelease changed the row:\nbefore %+v\nafter  %+v", before, after)
	}
}

func testAdminForceCompleteMakesLaterDeliveriesDuplicates(h *harness, key string) {
	ad := h.admin()
	ctx := context.Background()
	a := h.acquire(key, "w1")
	h.release(a.Claim, "outcome unknown")
	exp := h.clock.Now().Add(2 * retention)
	before, err := ad.ForceComplete(ctx, claimstore.ForceCompleteParams{Key: key, Result: "ch_manual", ExpiresAt: exp})
	if err != nil {
		h.t.Fatalf("ForceComplete: %v", err)
	}
	if before.Status != claimstore.StatusReleased || before.LastError != "outcome unknown" {
		h.t.Fatalf("ForceComplete returned %+v, want the released row", before)
	}
	got := h.get(key)
	if got.Status != claimstore.StatusCompleted || got.Result != "ch_manual" || got.Token != 1 {
		h.t.Fatalf("after ForceComplete = %+v, want COMPLETED with ch_manual, token 1", got)
	}
	if got.ExpiresAt.Unix() != claimstore.ExpirySeconds(exp) {
		h.t.Errorf("ExpiresAt = %d s, want %d", got.ExpiresAt.Unix(), claimstore.ExpirySeconds(exp))
	}
	d := h.acquire(key, "w2")
	h.wantOutcome(d, claimstore.Duplicate)
	if d.Claim.Result != "ch_manual" {
		h.t.Fatalf("duplicate result = %q, want ch_manual", d.Claim.Result)
	}
	// An in-progress claim can be completed too; its holder loses it,
	// and an earlier expiry never shortens the row's.
	key2 := key + "-b"
	b := h.acquire(key2, "w1")
	if _, err := ad.ForceComplete(ctx, claimstore.ForceCompleteParams{Key: key2, Result: "ch_2", ExpiresAt: h.clock.Now().Add(time.Second)}); err != nil {
		h.t.Fatalf("ForceComplete in progress: %v", err)
	}
	if got := h.get(key2); got.ExpiresAt.Unix() != b.Claim.ExpiresAt.Unix() {
		h.t.Errorf("ExpiresAt = %v, want the row's later %v kept", got.ExpiresAt, b.Claim.ExpiresAt)
	}
	h.wantHolderWritesLost(b.Claim.Holder(), "the force-completed holder")
}

func testAdminForceCompleteRefuses(h *harness, key string) {
	ad := h.admin()
	ctx := context.Background()
	p := claimstore.ForceCompleteParams{Key: key, Result: "ch_x", ExpiresAt: h.clock.Now().Add(retention)}
	if _, err := ad.ForceComplete(ctx, p); !errors.Is(err, claimstore.ErrNotFound) {
		h.t.Errorf("ForceComplete of an absent key: err = %v, want ErrNotFound", err)
	}
	a := h.acquire(key, "w1")
	if _, err := ad.ForceComplete(ctx, claimstore.ForceCompleteParams{Key: key, ExpiresAt: p.ExpiresAt}); !errors.Is(err, claimstore.ErrInvalidParams) {
		h.t.Errorf("ForceComplete without a result: err = %v, want ErrInvalidParams", err)
	}
	h.complete(a.Claim, "ch_real")
	if _, err := ad.ForceComplete(ctx, p); !errors.Is(err, claimstore.ErrWrongState) {
		h.t.Errorf("ForceComplete of a completed claim: err = %v, want ErrWrongState", err)
	}
	if got := h.get(key); got.Result != "ch_real" {
		h.t.Fatalf("result = %q after a refused ForceComplete, want ch_real", got.Result)
	}
}

func testAdminForgetLetsTheKeyRunAgain(h *harness, key string) {
	ad := h.admin()
	ctx := context.Background()
	a := h.acquire(key, "w1")
	if _, err := ad.Forget(ctx, key); !errors.Is(err, claimstore.ErrWrongState) {
		h.t.Errorf("Forget of an in-progress claim: err = %v, want ErrWrongState", err)
	}
	h.complete(a.Claim, "ch_1")
	before, err := ad.Forget(ctx, key)
	if err != nil {
		h.t.Fatalf("Forget: %v", err)
	}
	if before.Status != claimstore.StatusCompleted || before.Result != "ch_1" {
		h.t.Fatalf("Forget returned %+v, want the completed row", before)
	}
	if _, err := h.s.Get(ctx, key); !errors.Is(err, claimstore.ErrNotFound) {
		h.t.Fatalf("Get after Forget: err = %v, want ErrNotFound", err)
	}
	if _, err := ad.Forget(ctx, key); !errors.Is(err, claimstore.ErrNotFound) {
		h.t.Errorf("second Forget: err = %v, want ErrNotFound", err)
	}
	b := h.acquire(key, "w2")
	h.wantOutcome(b, claimstore.Acquired)
	if b.Claim.Token != 1 || b.Claim.Attempts != 1 {
		h.t.Fatalf("claim after Forget = %+v, want a fresh row (token 1, attempts 1)", b.Claim)
	}
}

func testAdminExpiredRowCountsAsAbsent(h *harness, key string) {
	ad := h.admin()
	a := h.acquire(key, "w1")
	h.complete(a.Claim, "ch_1")
	h.clock.Advance(retention + time.Second)
	if _, err := ad.Forget(context.Background(), key); !errors.Is(err, claimstore.ErrNotFound) {
		h.t.Errorf("Forget of an expired row: err = %v, want ErrNotFound", err)
	}
}

func testAdminConcurrentForceReleaseChangesOnce(h *harness, key string) {
	ad := h.admin()
	h.acquire(key, "w1")
	const racers = 8
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = ad.ForceRelease(context.Background(), key)
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, claimstore.ErrWrongState), errors.Is(err, claimstore.ErrClaimChanged):
		default:
			h.t.Errorf("ForceRelease race: unexpected error %v", err)
		}
	}
	if won != 1 {
		h.t.Fatalf("%d of %d concurrent ForceRelease calls changed the row, want exactly 1", won, racers)
	}
}

// admin returns the store as a claimstore.Admin, or skips the behaviour.
func (h *harness) admin() claimstore.Admin {
	h.t.Helper()
	ad, ok := h.s.(claimstore.Admin)
	if !ok {
		h.t.Skipf("%T does not implement claimstore.Admin", h.s)
	}
	return ad
}
