package cache_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/cache"
	"github.com/claimfirst/claimfirst/claimstore/claimstoretest"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/awstest"
)

// The cache answers as the store would: the whole conformance suite.
func TestConformanceMemory(t *testing.T) {
	t.Parallel()
	claimstoretest.Run(t, "cache/memory", func(t *testing.T, clock *claimstoretest.Clock) claimstore.Store {
		return mustNew(t, memory.New(memory.Config{Now: clock.Now, KeyPrefix: "svc#"}), cache.Config{Now: clock.Now})
	}, claimstoretest.Options{KeyPrefix: "svc#", Prefixed: func(t *testing.T, clock *claimstoretest.Clock, prefix string) claimstore.Store {
		return mustNew(t, memory.New(memory.Config{Now: clock.Now, KeyPrefix: prefix}), cache.Config{Now: clock.Now})
	}})
}

func TestConformanceDynamo(t *testing.T) {
	t.Parallel()
	client, table := awstest.ClaimTable(t, "cache")
	claimstoretest.Run(t, "cache/dynamo", func(t *testing.T, clock *claimstoretest.Clock) claimstore.Store {
		s, err := dynamo.New(dynamo.Config{Client: client, Table: table, KeyPrefix: "svc#", Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		return mustNew(t, s, cache.Config{Now: clock.Now})
	}, claimstoretest.Options{KeyPrefix: "svc#", RaceRounds: 5, Prefixed: func(t *testing.T, clock *claimstoretest.Clock, prefix string) claimstore.Store {
		s, err := dynamo.New(dynamo.Config{Client: client, Table: table, KeyPrefix: prefix, Now: clock.Now}) // one table: the prefixes share it
		if err != nil {
			t.Fatal(err)
		}
		return mustNew(t, s, cache.Config{Now: clock.Now})
	}})
}

func mustNew(t *testing.T, inner claimstore.Store, cfg cache.Config) *cache.Store {
	t.Helper()
	s, err := cache.New(inner, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// counting counts the Acquire calls that reach the store.
type counting struct {
	claimstore.Store
	acquires atomic.Int64
}

func (c *counting) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	c.acquires.Add(1)
	return c.Store.Acquire(ctx, p)
}

type env struct {
	t     *testing.T
	clock *claimstoretest.Clock
	inner *counting
	s     *cache.Store
}

func newEnv(t *testing.T, cfg cache.Config) *env {
	clock := claimstoretest.NewClock()
	e := &env{t: t, clock: clock, inner: &counting{Store: memory.New(memory.Config{Now: clock.Now})}}
	cfg.Now = clock.Now
	e.s = mustNew(t, e.inner, cfg)
	return e
}

func (e *env) acquire(s claimstore.Store, key, fp string) claimstore.Acquisition {
	e.t.Helper()
	a, err := s.Acquire(context.Background(), claimstore.AcquireParams{Key: key, Owner: "w", Fingerprint: fp,
		LeaseUntil: e.clock.Now().Add(30 * time.Second), ExpiresAt: e.clock.Now().Add(time.Hour)})
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func (e *env) complete(s claimstore.Store, c claimstore.Claim, result string, retention time.Duration) error {
	return s.Complete(context.Background(), claimstore.CompleteParams{Holder: c.Holder(), Result: result, ExpiresAt: e.clock.Now().Add(retention)})
}

func TestDuplicateAnsweredWithoutTheStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cache.Config{})
	a := e.acquire(e.s, "k", "fp1")
	if err := e.complete(e.s, a.Claim, "done", time.Hour); err != nil {
		t.Fatal(err)
	}
	before := e.inner.acquires.Load()
	for range 3 {
		d := e.acquire(e.s, "k", "fp1")
		if d.Outcome != claimstore.Duplicate || !d.Cached || d.Claim.Result != "done" || d.Claim.Token != 1 {
			t.Fatalf("repeat = %+v; want a cached duplicate with result done, token 1", d)
		}
	}
	if n := e.inner.acquires.Load() - before; n != 0 {
		t.Errorf("%d acquires reached the store for a key completed here, want 0", n)
	}
	if r := e.acquire(e.s, "k", "fp2"); r.Outcome != claimstore.KeyReused || !r.Cached {
		t.Errorf("another fingerprint = %+v; want KeyReused, as the store answers", r)
	}
	if st := e.s.Stats(); st.Hits != 4 || st.Misses != 1 {
		t.Errorf("stats = %+v, want 4 hits and 1 miss", st)
	}
}

// The cache never answers for a key it did not see completed.
func TestNeverAnswersUnseen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// run leaves the key in some state and returns the outcome the
		// store gives the next Acquire.
		run func(e *env) claimstore.Outcome
	}{
		{"held", func(e *env) claimstore.Outcome {
			e.acquire(e.s, "k", "")
			return claimstore.HeldElsewhere
		}},
		{"released", func(e *env) claimstore.Outcome {
			a := e.acquire(e.s, "k", "")
			if err := e.s.Release(context.Background(), claimstore.ReleaseParams{Holder: a.Claim.Holder()}); err != nil {
				e.t.Fatal(err)
			}
			return claimstore.Acquired
		}},
		{"completion failed: lease lost", func(e *env) claimstore.Outcome {
			a := e.acquire(e.s, "k", "")
			e.clock.Advance(time.Minute)
			b := e.acquire(e.inner, "k", "") // another process takes over
			if err := e.complete(e.s, a.Claim, "late", time.Hour); !errors.Is(err, claimstore.ErrLeaseLost) {
				e.t.Fatalf("late completion = %v, want ErrLeaseLost", err)
			}
			_ = b
			return claimstore.HeldElsewhere
		}},
		{"past the row's expiry", func(e *env) claimstore.Outcome {
			a := e.acquire(e.s, "k", "")
			if err := e.complete(e.s, a.Claim, "done", 2*time.Minute); err != nil {
				e.t.Fatal(err)
			}
			e.clock.Advance(3 * time.Minute) // TTL is 5m, the row expired at 2m
			return claimstore.Acquired
		}},
		{"past the TTL", func(e *env) claimstore.Outcome {
			a := e.acquire(e.s, "k", "")
			if err := e.complete(e.s, a.Claim, "done", time.Hour); err != nil {
				e.t.Fatal(err)
			}
			e.clock.Advance(6 * time.Minute)
			return claimstore.Duplicate // from the store, not the cache
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, cache.Config{TTL: 5 * time.Minute})
			want := tc.run(e)
			before := e.inner.acquires.Load()
			got := e.acquire(e.s, "k", "")
			if got.Cached || got.Outcome != want || e.inner.acquires.Load() != before+1 {
				t.Errorf("next acquire = %v (cached %v); want %v from the store", got.Outcome, got.Cached, want)
			}
		})
	}
}

// A duplicate the store reported is remembered too: a key completed by
// another process costs one request here, then none.
func TestRemembersDuplicatesFromTheStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cache.Config{})
	a := e.acquire(e.inner, "k", "")
	if err := e.complete(e.inner, a.Claim, "elsewhere", time.Hour); err != nil {
		t.Fatal(err)
	}
	first, second := e.acquire(e.s, "k", ""), e.acquire(e.s, "k", "")
	if first.Outcome != claimstore.Duplicate || first.Cached || second.Outcome != claimstore.Duplicate || !second.Cached {
		t.Errorf("acquires = %+v, %+v; want a duplicate from the store, then from memory", first, second)
	}
}

func TestBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cache.Config{Size: 2})
	for _, k := range []string{"a", "b", "c"} {
		a := e.acquire(e.s, k, "")
		if err := e.complete(e.s, a.Claim, k, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.acquire(e.s, "a", ""); got.Cached {
		t.Errorf("the least recently used key is still cached past Size")
	}
	if got := e.acquire(e.s, "c", ""); !got.Cached {
		t.Errorf("the most recent key is not cached")
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	_, err := cache.New(nil, cache.Config{Size: -1, TTL: -time.Second})
	if err == nil {
		t.Fatal("New accepted a nil store and bad settings")
	}
	for _, want := range []string{"inner store is required", "Size -1", "TTL -1s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
