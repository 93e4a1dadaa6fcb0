package cache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
)

// Config configures a Store.
type Config struct {
	// Size is how many completed keys are remembered; past it, the least
	// recently used is forgotten. Defaults to 10000.
	Size int
	// TTL is how long a key seen completed is answered from memory. An
	// entry never outlives the row's own expiry (the retention the claim
	// was completed with), so the cache cannot answer for a key the store
	// has forgotten. It bounds how long an operator's change to a completed
	// row (claims forget, a forced release) goes unseen by this process.
	// Defaults to 5m.
	TTL time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Size == 0 {
		c.Size = 10000
	}
	if c.TTL == 0 {
		c.TTL = 5 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Size < 1 {
		errs = append(errs, fmt.Errorf("Size %d: must be at least 1", c.Size))
	}
	if c.TTL < 0 {
		errs = append(errs, fmt.Errorf("TTL %s: must not be negative", c.TTL))
	}
	return errors.Join(errs...)
}

// Store is a claimstore.Store that remembers the keys it saw completed (its
// own completions, and duplicates the store reported) and answers a repeat
// Acquire of one from memory. Every other call goes to the store it wraps.
// It is safe for concurrent use.
type Store struct {
	inner claimstore.Store
	cfg   Config

	mu      sync.Mutex
	order   *list.List               // of *entry, most recently used first
	entries map[string]*list.Element // by key
	// held are the acquisitions this process holds, by acquisition id: what
	// a completion needs to remember its key (fingerprint, first use).
	held map[string]claimstore.Claim

	hits, misses atomic.Int64
}

type entry struct {
	claim claimstore.Claim // as completed
	until time.Time        // answered from memory until then
}

var (
	_ claimstore.Store       = (*Store)(nil)
	_ claimstore.TxCompleter = (*Store)(nil)
)

// New wraps inner. Errors for bad settings name the field.
func New(inner claimstore.Store, cfg Config) (*Store, error) {
	cfg.setDefaults()
	var errs []error
	if inner == nil {
		errs = append(errs, errors.New("inner store is required"))
	}
	if err := cfg.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("cache: %w", errors.Join(errs...))
	}
	return &Store{inner: inner, cfg: cfg, order: list.New(), entries: map[string]*list.Element{}, held: map[string]claimstore.Claim{}}, nil
}

// Stats counts the Acquire calls answered from memory (Hits) and passed to
// the store (Misses).
type Stats struct {
	Hits, Misses int64
}

// Stats returns the counts so far.
func (s *Store) Stats() Stats { return Stats{Hits: s.hits.Load(), Misses: s.misses.Load()} }

// Acquire answers from memory for a key seen completed and not yet past the
// entry's end: Duplicate with the stored result, or KeyReused when both
// fingerprints are set and differ (as the store would), with Cached set.
// Otherwise it asks the store.
func (s *Store) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	if c, ok := s.lookup(p.Key); ok {
		s.hits.Add(1)
		out := claimstore.Duplicate
		if p.Fingerprint != "" && c.Fingerprint != "" && p.Fingerprint != c.Fingerprint {
			out = claimstore.KeyReused
		}
		return claimstore.Acquisition{Outcome: out, Claim: c, Cached: true}, nil
	}
	s.misses.Add(1)
	a, err := s.inner.Acquire(ctx, p)
	if err != nil {
		return a, err
	}
	switch a.Outcome {
	case claimstore.Acquired:
		s.hold(a.Claim)
	case claimstore.Duplicate:
		s.remember(a.Claim)
	}
	return a, nil
}

// Renew passes to the store.
func (s *Store) Renew(ctx context.Context, p claimstore.RenewParams) error {
	err := s.inner.Renew(ctx, p)
	if errors.Is(err, claimstore.ErrLeaseLost) {
		s.unhold(p.Acq)
	}
	return err
}

// Complete passes to the store and, once it succeeded, remembers the key.
func (s *Store) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	err := s.inner.Complete(ctx, p)
	s.completed(p, err)
	return err
}

// CompleteTx passes to the store if it is a claimstore.TxCompleter (else it
// fails with claimstore.ErrTxUnsupported) and, once it succeeded, remembers
// the key.
func (s *Store) CompleteTx(ctx context.Context, p claimstore.CompleteParams, w claimstore.TxWrites) error {
	tx, ok := s.inner.(claimstore.TxCompleter)
	if !ok {
		return claimstore.ErrTxUnsupported
	}
	err := tx.CompleteTx(ctx, p, w)
	s.completed(p, err)
	return err
}

// Release passes to the store.
func (s *Store) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	s.unhold(p.Acq)
	return s.inner.Release(ctx, p)
}

// Get passes to the store: diagnostics read the row, not the cache.
func (s *Store) Get(ctx context.Context, key string) (claimstore.Claim, error) {
	return s.inner.Get(ctx, key)
}

func (s *Store) completed(p claimstore.CompleteParams, err error) {
	s.mu.Lock()
	c, ok := s.held[p.Acq]
	if err == nil || errors.Is(err, claimstore.ErrLeaseLost) {
		delete(s.held, p.Acq) // done with; after another error, a retry may still complete it
	}
	s.mu.Unlock()
	if err != nil || !ok || c.Key != p.Key {
		return // not completed, or by an acquisition this process did not see
	}
	c.Status, c.Result, c.ExpiresAt, c.LastError = claimstore.StatusCompleted, p.Result, p.ExpiresAt, ""
	s.remember(c)
}

// lookup returns the live entry for key, dropping an expired one.
func (s *Store) lookup(key string) (claimstore.Claim, bool) {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.entries[key]
	if !ok {
		return claimstore.Claim{}, false
	}
	e := el.Value.(*entry)
	if !now.Before(e.until) {
		s.order.Remove(el)
		delete(s.entries, key)
		return claimstore.Claim{}, false
	}
	s.order.MoveToFront(el)
	return e.claim, true
}

// remember records c, a completed claim, until the earlier of TTL from now
// and its expiry.
func (s *Store) remember(c claimstore.Claim) {
	if c.Status != claimstore.StatusCompleted {
		return
	}
	until := s.cfg.Now().Add(s.cfg.TTL)
	if !c.ExpiresAt.IsZero() && c.ExpiresAt.Before(until) {
		until = c.ExpiresAt
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.entries[c.Key]; ok {
		el.Value = &entry{claim: c, until: until}
		s.order.MoveToFront(el)
		return
	}
	s.entries[c.Key] = s.order.PushFront(&entry{claim: c, until: until})
	for s.order.Len() > s.cfg.Size {
		last := s.order.Back()
		s.order.Remove(last)
		delete(s.entries, last.Value.(*entry).claim.Key)
	}
}

// hold notes an acquisition of this process until it completes or ends.
// Acquisitions abandoned without a word (a lost lease) are bounded by Size.
func (s *Store) hold(c claimstore.Claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) >= s.cfg.Size {
		for acq := range s.held { // forget one: its completion is then just not cached
			delete(s.held, acq)
			break
		}
	}
	s.held[c.Acq] = c
}

func (s *Store) unhold(acq string) {
	s.mu.Lock()
	delete(s.held, acq)
	s.mu.Unlock()
}
