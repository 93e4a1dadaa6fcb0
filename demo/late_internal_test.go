package demo

import (
	"errors"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/provider"
)

// TestCommitLeaseLost: a commit by a holder whose claim was taken over is
// refused as a lost lease and writes nothing; the new holder's commit
// writes the entry once, and a retry of it writes nothing again.
func TestCommitLeaseLost(t *testing.T) {
	t.Parallel()
	c := &clock{}
	testCommitLeaseLost(t, c, memory.New(memory.Config{Now: c.Now}), newLedger())
}

// testCommitLeaseLost is TestCommitLeaseLost on store and db, whose clock
// is c.
func testCommitLeaseLost(t *testing.T, c *clock, store claimstore.Store, db ledgerDB) {
	ctx := t.Context()
	e := ledgerEntry{EntryID: "ent_1", Account: "acct_1", Amount: 500}
	acquire := func() claimstore.Holder {
		t.Helper()
		now := c.Now()
		a, err := store.Acquire(ctx, claimstore.AcquireParams{Key: e.EntryID, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		if err != nil || a.Outcome != claimstore.Acquired {
			t.Fatalf("acquire: %v, %v", a.Outcome, err)
		}
		return a.Claim.Holder()
	}
	complete := func(h claimstore.Holder) claimstore.CompleteParams {
		return claimstore.CompleteParams{Holder: h, Result: "done", ExpiresAt: c.Now().Add(time.Hour)}
	}
	old := acquire()
	c.Advance(2 * time.Minute) // the old holder's lease ends
	taker := acquire()
	if err := db.commit(ctx, store, complete(old), e); !errors.Is(err, claimstore.ErrLeaseLost) {
		t.Fatalf("commit by the superseded holder = %v, want ErrLeaseLost", err)
	}
	if n, _, balances, err := db.entries(ctx); err != nil || n != 0 || balances["acct_1"] != 0 {
		t.Fatalf("a refused commit wrote %d entries, balance %d", n, balances["acct_1"])
	}
	for range 2 { // the second is a retry of an applied commit
		if err := db.commit(ctx, store, complete(taker), e); err != nil {
			t.Fatalf("commit by the holder: %v", err)
		}
	}
	if n, _, balances, err := db.entries(ctx); err != nil || n != 1 || balances["acct_1"] != 500 {
		t.Errorf("after the holder's commit and its retry: %d entries, balance %d; want 1, 500", n, balances["acct_1"])
	}
	if got, err := store.Get(ctx, e.EntryID); err != nil || got.Status != claimstore.StatusCompleted || got.Token != 2 {
		t.Errorf("claim after commit: %+v, %v; want completed with token 2", got, err)
	}
}

// TestForgetfulProvider: a key is replayed within its lifetime and charged
// anew after it; the lookup lists every charge of the payment.
func TestForgetfulProvider(t *testing.T) {
	t.Parallel()
	c := &clock{}
	p := newForgetfulProvider(c.Now, time.Hour)
	pay := provider.Payment{PaymentID: "pay_1", Amount: 100, Currency: "EUR"}
	first, err := p.charge("k", pay)
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Hour - time.Millisecond)
	if again, err := p.charge("k", pay); err != nil || again != first {
		t.Errorf("within the lifetime: %q, %v; want the replay %q", again, err, first)
	}
	c.Advance(time.Millisecond)
	later, err := p.charge("k", pay)
	if err != nil || later == first {
		t.Errorf("at the lifetime: %q, %v; want a new charge", later, err)
	}
	if got := p.lookup("pay_1"); len(got) != 2 || got[0] != first || got[1] != later {
		t.Errorf("lookup = %q, want [%s %s]", got, first, later)
	}
	lose := func(string) bool { return true }
	p.lose.Store(&lose)
	if _, err := p.charge("k", pay); !errors.Is(err, errAnswerLost) {
		t.Errorf("with answers lost: %v, want errAnswerLost", err)
	}
	if st := p.stats; st.charges != 2 || st.replays != 2 || st.forgotten != 1 || st.lookups != 1 {
		t.Errorf("stats %+v, want 2 charges, 2 replays, 1 forgotten, 1 lookup", st)
	}
}

func TestEffectsMark(t *testing.T) {
	t.Parallel()
	units := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		counts map[string]int
		want   string
	}{
		{map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}, "ok"},
		{map[string]int{"a": 2, "b": 1, "c": 3, "d": 1}, "double 3"},
		{map[string]int{"a": 1, "b": 1}, "lost 2"},
		{map[string]int{"a": 2, "b": 1, "c": 1}, "double 1, lost 1"},
	} {
		if got := countEffects(units, tc.counts).String(); got != tc.want {
			t.Errorf("countEffects(%v) = %q, want %q", tc.counts, got, tc.want)
		}
	}
}
