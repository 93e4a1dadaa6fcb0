package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
)

var (
	_ claimstore.Store       = (*StoreView)(nil)
	_ claimstore.TxCompleter = (*StoreView)(nil)
)

// Entry is one ledger entry a handler commits with its claim's completion.
type Entry struct {
	// Account groups entries (a FIFO message group in the workload).
	Account string
	// Ref names the business operation (the payment id).
	Ref string
	// Seq orders entries within an account, for the FIFO invariant.
	Seq int
	// Amount is the entry's amount in minor units.
	Amount int64
	// Token is the fencing token of the handler call that wrote the entry
	// (worker.Message.Token).
	Token int64
}

// Writes are ledger entries, the claimstore.TxWrites the simulated store
// commits with a completion (worker.Message.Commit).
type Writes []Entry

// Len implements claimstore.TxWrites.
func (w Writes) Len() int { return len(w) }

// Store is the simulated claim table: the rows and a ledger, shared by every
// worker. Each worker reads and writes it through its own StoreView, with
// its own clock, as each DynamoDB client evaluates conditions against the
// instants its caller computed. It decides with the same claimstore helpers
// (Decide, Takeover, NewClaim) as claimstore/memory and claimstore/dynamo;
// unlike claimstore/memory it commits ledger Writes with a completion, in
// one step, so the ledger handler runs in the simulation.
type Store struct {
	mu     sync.Mutex
	claims map[string]claimstore.Claim
	ledger []Applied
	stale  []string // writes applied with a token that was not the row's
}

// Applied is a ledger entry as committed: with the claim that committed it.
type Applied struct {
	Entry
	// Key and Token are the claim's.
	Key   string
	Token int64
	// At is when it was committed (true time).
	At time.Time
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{claims: make(map[string]claimstore.Claim)}
}

// View returns the store as a worker with the clock now sees it.
func (s *Store) View(now func() time.Time) *StoreView {
	if now == nil {
		now = time.Now
	}
	return &StoreView{s: s, now: now}
}

// Ledger returns the entries committed so far, in commit order.
func (s *Store) Ledger() []Applied {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Applied(nil), s.ledger...)
}

// Claim returns a key's row as stored, expired or not.
func (s *Store) Claim(key string) (claimstore.Claim, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.claims[key]
	return c, ok
}

// StoreView is one worker's client of a Store: a claimstore.Store and
// claimstore.TxCompleter whose conditions read that worker's clock.
type StoreView struct {
	s   *Store
	now func() time.Time
}

// Acquire implements claimstore.Store.
func (v *StoreView) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	if err := ctx.Err(); err != nil {
		return claimstore.Acquisition{}, err
	}
	now := v.now()
	if err := p.Check("", now); err != nil {
		return claimstore.Acquisition{}, err
	}
	if p.Acq == "" {
		p.Acq = claimstore.NewAcq()
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.claims[p.Key]
	if !ok {
		c := claimstore.NewClaim(p, now)
		s.claims[p.Key] = c
		return claimstore.Acquisition{Outcome: claimstore.Acquired, Claim: c}, nil
	}
	outcome, take := old.Decide(p, now)
	if !take {
		return claimstore.Acquisition{Outcome: outcome, Claim: old}, nil
	}
	c := old.Takeover(p, now)
	s.claims[p.Key] = c
	return claimstore.Acquisition{Outcome: claimstore.Acquired, Claim: c}, nil
}

// Renew implements claimstore.Store.
func (v *StoreView) Renew(ctx context.Context, p claimstore.RenewParams) error {
	if err := p.Check(""); err != nil {
		return err
	}
	return v.update(ctx, p.Holder, "renew", claimstore.StatusInProgress, func(c *claimstore.Claim) {
		c.LeaseUntil = time.UnixMilli(claimstore.LeaseMillis(p.LeaseUntil))
		c.ExpiresAt = time.Unix(claimstore.ExpirySeconds(p.RenewExpiry()), 0)
	})
}

// Complete implements claimstore.Store.
func (v *StoreView) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	return v.CompleteTx(ctx, p, nil)
}

// CompleteTx implements claimstore.TxCompleter: the entries are appended to
// the ledger if and only if the claim is completed by this call.
func (v *StoreView) CompleteTx(ctx context.Context, p claimstore.CompleteParams, w claimstore.TxWrites) error {
	if err := p.Check(""); err != nil {
		return err
	}
	var entries Writes
	if w != nil {
		var ok bool
		if entries, ok = w.(Writes); !ok {
			return fmt.Errorf("%w: complete: writes of type %T, want sim.Writes", claimstore.ErrInvalidParams, w)
		}
	}
	return v.update(ctx, p.Holder, "complete", claimstore.StatusCompleted, func(c *claimstore.Claim) {
		c.Status = claimstore.StatusCompleted
		c.Result = p.Result
		c.ExpiresAt = time.Unix(claimstore.ExpirySeconds(p.ExpiresAt), 0)
		for _, e := range entries {
			v.s.ledger = append(v.s.ledger, Applied{Entry: e, Key: c.Key, Token: c.Token, At: time.Now()})
		}
	})
}

// Release implements claimstore.Store.
func (v *StoreView) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	if err := p.Check(""); err != nil {
		return err
	}
	return v.update(ctx, p.Holder, "release", claimstore.StatusReleased, func(c *claimstore.Claim) {
		c.Status = claimstore.StatusReleased
		if p.LastError != "" {
			c.LastError = claimstore.TruncateLastError(p.LastError)
		}
	})
}

// update applies change if h holds the claim: "acq = mine AND status =
// IN_PROGRESS", or succeeds without a change when the row shows h's own
// earlier write (h's acq in the state target).
func (v *StoreView) update(ctx context.Context, h claimstore.Holder, op string, target claimstore.Status, change func(*claimstore.Claim)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.claims[h.Key]
	switch {
	case ok && c.Acq == h.Acq && c.Status == claimstore.StatusInProgress:
	case ok && c.Acq == h.Acq && c.Status == target:
		return nil
	default:
		return fmt.Errorf("%s %q token %d: %w", op, h.Key, h.Token, claimstore.ErrLeaseLost)
	}
	if h.Token != c.Token {
		s.stale = append(s.stale, fmt.Sprintf("%s %q applied with token %d over the row's token %d", op, h.Key, h.Token, c.Token))
	}
	change(&c)
	s.claims[h.Key] = c
	return nil
}

// Stale returns the writes applied with a token that was not the row's:
// a fencing failure (none is the invariant).
func (s *Store) Stale() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.stale...)
}

// Get implements claimstore.Store.
func (v *StoreView) Get(ctx context.Context, key string) (claimstore.Claim, error) {
	if err := ctx.Err(); err != nil {
		return claimstore.Claim{}, err
	}
	if err := claimstore.CheckKey("", key); err != nil {
		return claimstore.Claim{}, err
	}
	c, ok := v.s.Claim(key)
	if !ok || !c.Live(v.now()) {
		return claimstore.Claim{}, fmt.Errorf("get %q: %w", key, claimstore.ErrNotFound)
	}
	return c, nil
}

// ErrUnavailable is a simulated dependency failure: an outage, throttling,
// or an error injected before or after a call.
var ErrUnavailable = errors.New("sim: unavailable")

// StoreFault is what the fault layer does to one store call.
type StoreFault int

// The store faults.
const (
	// NoFault passes the call through.
	NoFault StoreFault = iota
	// FailBefore fails the call before it reaches the store: nothing written.
	FailBefore
	// LoseAnswer applies the call and then fails it: the write happened,
	// the caller does not know.
	LoseAnswer
	// Throttle fails the call as throttled, before it reaches the store.
	Throttle
	// Slow delays the call by the layer's latency, then passes it through.
	Slow
)

// FaultyStore is a claim store behind a fault layer: each call's fault is
// decided by Decide from the operation, the key and the call's attempt
// number for that operation and key, every call fails while Outage says
// the store is out, and a key's renewals fail for the length of a blip
// that Blip starts.
type FaultyStore struct {
	// Inner is the store the calls reach. Required.
	Inner interface {
		claimstore.Store
		claimstore.TxCompleter
	}
	// Decide returns the fault of one call. Defaults to none.
	Decide func(op, key string, attempt int) StoreFault
	// Outage reports whether the store is out at now. Defaults to never.
	Outage func(now time.Time) bool
	// Blip returns how long every renewal of key fails, starting with its
	// n-th renewal through this client, or 0: the store fails a holder's
	// renewals, and only those, for a while. Defaults to never.
	Blip func(key string, n int) time.Duration
	// Latency is how long a Slow call waits. Defaults to 2s.
	Latency time.Duration
	// Injected counts the faults injected, by kind; may be nil.
	Injected func(kind string)

	mu       sync.Mutex
	attempts map[string]int
	blips    map[string]time.Time // key -> when its renewals' blip ends
}

var (
	_ claimstore.Store       = (*FaultyStore)(nil)
	_ claimstore.TxCompleter = (*FaultyStore)(nil)
)

func (f *FaultyStore) fault(ctx context.Context, op, key string) (after bool, err error) {
	if f.Outage != nil && f.Outage(time.Now()) {
		f.count("store_outage")
		return false, fmt.Errorf("store %s %q: %w: outage", op, key, ErrUnavailable)
	}
	if f.Decide == nil && f.Blip == nil {
		return false, nil
	}
	f.mu.Lock()
	if f.attempts == nil {
		f.attempts, f.blips = make(map[string]int), make(map[string]time.Time)
	}
	f.attempts[op+"\x00"+key]++
	n := f.attempts[op+"\x00"+key]
	blip := false
	if op == "renew" && f.Blip != nil {
		if now := time.Now(); now.Before(f.blips[key]) {
			blip = true
		} else if d := f.Blip(key, n); d > 0 {
			f.blips[key], blip = now.Add(d), true
			f.count("renewal_blip")
		}
	}
	f.mu.Unlock()
	if blip {
		f.count("renewal_blip_error")
		return false, fmt.Errorf("store %s %q: %w: renewal blip", op, key, ErrUnavailable)
	}
	if f.Decide == nil {
		return false, nil
	}
	switch f.Decide(op, key, n) {
	case FailBefore:
		f.count("store_error_before")
		return false, fmt.Errorf("store %s %q: %w: injected error", op, key, ErrUnavailable)
	case Throttle:
		f.count("store_throttle")
		return false, fmt.Errorf("store %s %q: %w: ProvisionedThroughputExceededException", op, key, ErrUnavailable)
	case LoseAnswer:
		f.count("store_answer_lost")
		return true, nil
	case Slow:
		f.count("store_latency")
		d := f.Latency
		if d == 0 {
			d = 2 * time.Second
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return false, nil
}

func (f *FaultyStore) count(kind string) {
	if f.Injected != nil {
		f.Injected(kind)
	}
}

func lost(op, key string, err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("store %s %q: %w: answer lost after the write", op, key, ErrUnavailable)
}

// Acquire implements claimstore.Store.
func (f *FaultyStore) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	after, err := f.fault(ctx, "acquire", p.Key)
	if err != nil {
		return claimstore.Acquisition{}, err
	}
	a, err := f.Inner.Acquire(ctx, p)
	if after {
		return claimstore.Acquisition{}, lost("acquire", p.Key, err)
	}
	return a, err
}

// Renew implements claimstore.Store.
func (f *FaultyStore) Renew(ctx context.Context, p claimstore.RenewParams) error {
	after, err := f.fault(ctx, "renew", p.Key)
	if err != nil {
		return err
	}
	err = f.Inner.Renew(ctx, p)
	if after {
		return lost("renew", p.Key, err)
	}
	return err
}

// Complete implements claimstore.Store.
func (f *FaultyStore) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	return f.CompleteTx(ctx, p, nil)
}

// CompleteTx implements claimstore.TxCompleter.
func (f *FaultyStore) CompleteTx(ctx context.Context, p claimstore.CompleteParams, w claimstore.TxWrites) error {
	after, err := f.fault(ctx, "complete", p.Key)
	if err != nil {
		return err
	}
	err = f.Inner.CompleteTx(ctx, p, w)
	if after {
		return lost("complete", p.Key, err)
	}
	return err
}

// Release implements claimstore.Store.
func (f *FaultyStore) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	after, err := f.fault(ctx, "release", p.Key)
	if err != nil {
		return err
	}
	err = f.Inner.Release(ctx, p)
	if after {
		return lost("release", p.Key, err)
	}
	return err
}

// Get implements claimstore.Store.
func (f *FaultyStore) Get(ctx context.Context, key string) (claimstore.Claim, error) {
	if _, err := f.fault(ctx, "get", key); err != nil {
		return claimstore.Claim{}, err
	}
	return f.Inner.Get(ctx, key)
}
