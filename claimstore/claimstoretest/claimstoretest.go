// Package claimstoretest is the conformance suite of the claim protocol: the
// behaviour every claimstore.Store must have, written once and run against
// each backend (memory and DynamoDB in this module; any other from a user's).
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
}

const (
	lease     = 30 * time.Second
	retention = time.Hour
)

// Run runs every conformance case against the store newStore returns, as
// subtests of t named backend/case.
func Run(t *testing.T, backend string, newStore Factory, opts Options) {
	t.Helper()
	if opts.RaceRounds == 0 {
		opts.RaceRounds = 50
	}
	t.Run(backend, func(t *testing.T) {
		for _, tc := range cases(opts) {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				clock := NewClock()
				h := &harness{t: t, s: newStore(t, clock), clock: clock}
				tc.run(h, newKey(t))
			})
		}
	})
}

type testCase struct {
	name string
	run  func(h *harness, key string)
}

func cases(opts Options) []testCase {
	return []testCase{
		{"first_claim", func(h *harness, key string) {
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
		}},
		{"duplicate_after_completion_returns_result", func(h *harness, key string) {
			a := h.acquire(key, "w1")
			h.complete(key, a.Claim.Token, "ch_123")
			d := h.acquire(key, "w2")
			h.wantOutcome(d, claimstore.Duplicate)
			if d.Claim.Result != "ch_123" || d.Claim.Token != 1 || d.Claim.Status != claimstore.StatusCompleted {
				h.t.Fatalf("duplicate claim = %+v, want result ch_123, token 1, COMPLETED", d.Claim)
			}
			h.clock.Advance(2 * lease) // a completed claim has no lease to expire
			h.wantOutcome(h.acquire(key, "w3"), claimstore.Duplicate)
		}},
		{"held_elsewhere_while_lease_lives", func(h *harness, key string) {
			a := h.acquire(key, "w1")
			h.clock.Advance(lease - time.Second)
			b := h.acquire(key, "w2")
			h.wantOutcome(b, claimstore.HeldElsewhere)
			if !b.Claim.LeaseUntil.Equal(a.Claim.LeaseUntil) || b.Claim.Owner != "w1" || b.Claim.Token != 1 {
				h.t.Fatalf("held claim = %+v, want the holder's lease %v, owner w1, token 1", b.Claim, a.Claim.LeaseUntil)
			}
		}},
		{"takeover_after_lease_expiry", func(h *harness, key string) {
			h.acquire(key, "w1")
			h.clock.Advance(lease)
			b := h.acquire(key, "w2")
			h.wantOutcome(b, claimstore.Acquired)
			if b.Claim.Token != 2 || b.Claim.Attempts != 2 || b.Claim.Owner != "w2" {
				h.t.Fatalf("takeover claim = %+v, want token 2, attempts 2, owner w2", b.Claim)
			}
		}},
		{"takeover_after_release", func(h *harness, key string) {
			a := h.acquire(key, "w1")
			if err := h.s.Release(context.Background(), key, a.Claim.Token); err != nil {
				h.t.Fatalf("Release: %v", err)
			}
			if got := h.get(key); got.Status != claimstore.StatusReleased || got.Token != 1 {
				h.t.Fatalf("after release = %+v, want RELEASED with token 1 kept", got)
			}
			b := h.acquire(key, "w2")
			h.wantOutcome(b, claimstore.Acquired)
			if b.Claim.Token != 2 {
				h.t.Fatalf("token after release and takeover = %d, want 2", b.Claim.Token)
			}
		}},
		{"renew_extends_the_lease", func(h *harness, key string) {
			a := h.acquire(key, "w1")
			newLease := h.clock.Now().Add(3 * lease)
			if err := h.s.Renew(context.Background(), claimstore.RenewParams{Key: key, Token: a.Claim.Token, LeaseUntil: newLease}); err != nil {
				h.t.Fatalf("Renew: %v", err)
			}
			h.clock.Advance(2 * lease)
			b := h.acquire(key, "w2")
			h.wantOutcome(b, claimstore.HeldElsewhere)
			if b.Claim.LeaseUntil.UnixMilli() != newLease.UnixMilli() {
				h.t.Fatalf("LeaseUntil = %v, want the renewed %v", b.Claim.LeaseUntil, newLease)
			}
		}},
		{"stale_token_rejected", func(h *harness, key string) {
			old := h.acquire(key, "w1")
			h.clock.Advance(lease + time.Millisecond)
			cur := h.acquire(key, "w2")
			h.wantOutcome(cur, claimstore.Acquired)
			before := h.get(key)
			ctx := context.Background()
			stale := old.Claim.Token
			ops := map[string]error{
				"renew":    h.s.Renew(ctx, claimstore.RenewParams{Key: key, Token: stale, LeaseUntil: h.clock.Now().Add(10 * lease)}),
				"complete": h.s.Complete(ctx, claimstore.CompleteParams{Key: key, Token: stale, Result: "late", ExpiresAt: h.clock.Now().Add(retention)}),
				"release":  h.s.Release(ctx, key, stale),
			}
			for op, err := range ops {
				if !errors.Is(err, claimstore.ErrLeaseLost) {
					h.t.Errorf("%s with stale token: err = %v, want ErrLeaseLost", op, err)
				}
			}
			if after := h.get(key); after != before {
				h.t.Fatalf("stale writes changed the claim:\nbefore %+v\nafter  %+v", before, after)
			}
			h.complete(key, cur.Claim.Token, "ok") // the current holder is unaffected
		}},
		{"finished_claim_rejects_holder_writes", func(h *harness, key string) {
			a := h.acquire(key, "w1")
			h.complete(key, a.Claim.Token, "done")
			ctx := context.Background()
			if err := h.s.Renew(ctx, claimstore.RenewParams{Key: key, Token: a.Claim.Token, LeaseUntil: h.clock.Now().Add(lease)}); !errors.Is(err, claimstore.ErrLeaseLost) {
				h.t.Errorf("renew after complete: err = %v, want ErrLeaseLost", err)
			}
			if err := h.s.Release(ctx, key, a.Claim.Token); !errors.Is(err, claimstore.ErrLeaseLost) {
				h.t.Errorf("release after complete: err = %v, want ErrLeaseLost", err)
			}
			if err := h.s.Complete(ctx, claimstore.CompleteParams{Key: key, Token: a.Claim.Token, Result: "again", ExpiresAt: h.clock.Now().Add(retention)}); !errors.Is(err, claimstore.ErrLeaseLost) {
				h.t.Errorf("second complete: err = %v, want ErrLeaseLost", err)
			}
			if got := h.get(key); got.Result != "done" || got.Status != claimstore.StatusCompleted {
				h.t.Fatalf("claim = %+v, want COMPLETED with result done", got)
			}
		}},
		{"unknown_key_rejects_holder_writes", func(h *harness, key string) {
			ctx := context.Background()
			if err := h.s.Release(ctx, key, 1); !errors.Is(err, claimstore.ErrLeaseLost) {
				h.t.Errorf("release of unknown key: err = %v, want ErrLeaseLost", err)
			}
			if err := h.s.Complete(ctx, claimstore.CompleteParams{Key: key, Token: 1, ExpiresAt: h.clock.Now().Add(retention)}); !errors.Is(err, claimstore.ErrLeaseLost) {
				h.t.Errorf("complete of unknown key: err = %v, want ErrLeaseLost", err)
			}
			if _, err := h.s.Get(ctx, key); !errors.Is(err, claimstore.ErrNotFound) {
				h.t.Errorf("Get of unknown key: err = %v, want ErrNotFound", err)
			}
		}},
		{"expired_row_counts_as_absent", func(h *harness, key string) {
			a := h.acquire(key, "w1")
			if err := h.s.Complete(context.Background(), claimstore.CompleteParams{
				Key: key, Token: a.Claim.Token, Result: "old", ExpiresAt: h.clock.Now().Add(2 * time.Second),
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
		}},
		{"tokens_increase_with_every_acquisition", func(h *harness, key string) {
			for want := int64(1); want <= 5; want++ {
				a := h.acquire(key, "w")
				h.wantOutcome(a, claimstore.Acquired)
				if a.Claim.Token != want || a.Claim.Attempts != want {
					h.t.Fatalf("acquisition %d: token %d attempts %d", want, a.Claim.Token, a.Claim.Attempts)
				}
				if want%2 == 0 {
					h.clock.Advance(lease)
				} else if err := h.s.Release(context.Background(), key, a.Claim.Token); err != nil {
					h.t.Fatalf("Release: %v", err)
				}
			}
		}},
		{"invalid_keys_rejected", func(h *harness, key string) {
			justFits := key + strings.Repeat("k", claimstore.MaxKeyBytes-len(opts.KeyPrefix)-len(key))
			long := justFits + "k"
			for name, k := range map[string]string{"empty": "", "too long": long} {
				_, err := h.s.Acquire(context.Background(), h.params(k, "w"))
				if !errors.Is(err, claimstore.ErrInvalidKey) {
					h.t.Errorf("Acquire(%s key): err = %v, want ErrInvalidKey", name, err)
				}
			}
			h.wantOutcome(h.acquire(justFits, "w"), claimstore.Acquired)
		}},
		{"invalid_params_rejected", func(h *harness, key string) {
			p := h.params(key, "w")
			p.LeaseUntil = h.clock.Now().Add(-time.Second)
			if _, err := h.s.Acquire(context.Background(), p); !errors.Is(err, claimstore.ErrInvalidParams) {
				h.t.Errorf("Acquire with a lease in the past: err = %v, want ErrInvalidParams", err)
			}
			if _, err := h.s.Get(context.Background(), key); !errors.Is(err, claimstore.ErrNotFound) {
				h.t.Errorf("a rejected Acquire wrote a row: Get err = %v", err)
			}
		}},
		{"racing_acquirers_one_winner", func(h *harness, key string) {
			const racers = 16
			for round := range opts.RaceRounds {
				k := fmt.Sprintf("%s-%d", key, round)
				var (
					wg      sync.WaitGroup
					start   = make(chan struct{})
					results = make([]claimstore.Acquisition, racers)
					errs    = make([]error, racers)
				)
				for i := range racers {
					wg.Go(func() {
						<-start
						results[i], errs[i] = h.s.Acquire(context.Background(), h.params(k, "racer"))
					})
				}
				close(start)
				wg.Wait()
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
		}},
	}
}

type harness struct {
	t     *testing.T
	s     claimstore.Store
	clock *Clock
}

func (h *harness) params(key, owner string) claimstore.AcquireParams {
	now := h.clock.Now()
	return claimstore.AcquireParams{Key: key, Owner: owner, LeaseUntil: now.Add(lease), ExpiresAt: now.Add(retention)}
}

func (h *harness) acquire(key, owner string) claimstore.Acquisition {
	h.t.Helper()
	a, err := h.s.Acquire(context.Background(), h.params(key, owner))
	if err != nil {
		h.t.Fatalf("Acquire(%q): %v", key, err)
	}
	return a
}

func (h *harness) complete(key string, token int64, result string) {
	h.t.Helper()
	err := h.s.Complete(context.Background(), claimstore.CompleteParams{
		Key: key, Token: token, Result: result, ExpiresAt: h.clock.Now().Add(retention),
	})
	if err != nil {
		h.t.Fatalf("Complete(%q, %d): %v", key, token, err)
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
