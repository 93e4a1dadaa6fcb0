package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
)

// journal is a run's history and its invariant checks made while it runs.
type journal struct {
	start time.Time
	tol   time.Duration // clock tolerance of the lease check

	mu         sync.Mutex
	events     map[string][]string // by key
	aliases    map[string]string   // idempotency key -> the name its history is kept under
	violations []violation
	beliefs    map[string]map[string]belief // key -> acq -> what its holder believes
	injected   map[string]int
}

type violation struct {
	key, what string
}

// belief is a holder's lease as it knows it, in true time.
type belief struct {
	node  string
	token int64
	until time.Time
}

func newJournal(tol time.Duration) *journal {
	return &journal{start: time.Now(), tol: tol, events: map[string][]string{}, aliases: map[string]string{},
		beliefs: map[string]map[string]belief{}, injected: map[string]int{}}
}

func (j *journal) at() string {
	return time.Since(j.start).Round(time.Millisecond).String()
}

func (j *journal) event(key, node, format string, args ...any) {
	line := fmt.Sprintf("%10s %-6s %s", j.at(), node, fmt.Sprintf(format, args...))
	if os.Getenv("SIM_TRACE") != "" {
		fmt.Fprintln(os.Stderr, key, line)
	}
	j.mu.Lock()
	if a, ok := j.aliases[key]; ok {
		key = a
	}
	j.events[key] = append(j.events[key], line)
	j.mu.Unlock()
}

// alias keeps key's history under name.
func (j *journal) alias(key, name string) {
	if key == "" || key == name {
		return
	}
	j.mu.Lock()
	j.aliases[key] = name
	j.mu.Unlock()
}

func (j *journal) violate(key, format string, args ...any) {
	what := fmt.Sprintf(format, args...)
	j.mu.Lock()
	j.violations = append(j.violations, violation{key: key, what: what})
	j.events[key] = append(j.events[key], fmt.Sprintf("%10s        VIOLATION: %s", j.at(), what))
	j.mu.Unlock()
}

func (j *journal) inject(kind string) {
	j.mu.Lock()
	j.injected[kind]++
	j.mu.Unlock()
}

func (j *journal) history(key string) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.events[key], "\n")
}

// acquired checks that no other holder's lease, as that holder knows it,
// is live (beyond the clock tolerance) when n acquires key.
func (j *journal) acquired(key string, n *node, c claimstore.Claim) {
	now := time.Now()
	j.mu.Lock()
	bs := j.beliefs[key]
	if bs == nil {
		bs = map[string]belief{}
		j.beliefs[key] = bs
	}
	var clash []string
	for acq, b := range bs {
		if acq != c.Acq && b.until.Sub(now) > j.tol {
			clash = append(clash, fmt.Sprintf("%s token %d holds it %s more", b.node, b.token, b.until.Sub(now).Round(time.Millisecond)))
		}
	}
	skew := n.clock().Sub(now)
	bs[c.Acq] = belief{node: n.name, token: c.Token, until: c.LeaseUntil.Add(-skew)}
	j.mu.Unlock()
	sort.Strings(clash)
	for _, s := range clash {
		j.violate(key, "%s acquired token %d while %s", n.name, c.Token, s)
	}
}

func (j *journal) renewed(h claimstore.Holder, n *node, until time.Time) {
	skew := time.Until(n.clock())
	j.mu.Lock()
	if b, ok := j.beliefs[h.Key][h.Acq]; ok {
		b.until = until.Add(-skew)
		j.beliefs[h.Key][h.Acq] = b
	}
	j.mu.Unlock()
}

func (j *journal) ended(h claimstore.Holder) {
	j.mu.Lock()
	delete(j.beliefs[h.Key], h.Acq)
	j.mu.Unlock()
}

// recorder is the worker's view of its claim store: it writes the history
// and tells the journal what the worker believes it holds.
type recorder struct {
	j     *journal
	n     *node
	inner claimstore.Store
	truth *Store // the rows as they are, to check acknowledged writes
}

// acked checks that a write the store acknowledged is in the row: an
// acknowledged write is never lost (unless another holder has since taken
// the row, which then carries another acquisition).
func (r *recorder) acked(op string, h claimstore.Holder, ok func(c claimstore.Claim) bool) {
	c, found := r.truth.Claim(h.Key)
	if found && c.Acq == h.Acq && !ok(c) {
		r.j.violate(h.Key, "%s %s token %d acknowledged but not in the row (status %s, lease until %s)",
			r.n.name, op, h.Token, c.Status, c.LeaseUntil.Sub(r.j.start).Round(time.Millisecond))
	}
}

var (
	_ claimstore.Store       = (*recorder)(nil)
	_ claimstore.TxCompleter = (*recorder)(nil)
)

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func (r *recorder) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	a, err := r.inner.Acquire(ctx, p)
	if err != nil {
		r.j.event(p.Key, r.n.name, "acquire: %s", errText(err))
		return a, err
	}
	r.j.event(p.Key, r.n.name, "acquire: %s token %d", a.Outcome, a.Claim.Token)
	if a.Outcome == claimstore.Acquired {
		r.j.acquired(p.Key, r.n, a.Claim)
		if r.n.offBy != 0 {
			r.j.violate(p.Key, "%s acquired token %d with its clock %s off AWS's, beyond ClockSkewMax", r.n.name, a.Claim.Token, r.n.offBy)
		}
	}
	return a, nil
}

func (r *recorder) Renew(ctx context.Context, p claimstore.RenewParams) error {
	err := r.inner.Renew(ctx, p)
	switch {
	case err == nil:
		r.acked("renew", p.Holder, func(c claimstore.Claim) bool {
			return c.Status != claimstore.StatusInProgress || c.LeaseUntil.UnixMilli() >= p.LeaseUntil.UnixMilli()
		})
		r.j.renewed(p.Holder, r.n, p.LeaseUntil)
	case errors.Is(err, claimstore.ErrLeaseLost):
		r.j.ended(p.Holder)
		r.j.event(p.Key, r.n.name, "renew token %d: %s", p.Token, errText(err))
	}
	return err
}

func (r *recorder) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	return r.CompleteTx(ctx, p, nil)
}

func (r *recorder) CompleteTx(ctx context.Context, p claimstore.CompleteParams, w claimstore.TxWrites) error {
	// The handler has returned: from here on the holder only writes, fenced
	// by its acquisition, so a takeover no longer runs two handlers at once.
	r.j.ended(p.Holder)
	err := claimstore.CompleteTx(ctx, r.inner, p, w)
	n := 0
	if w != nil {
		n = w.Len()
	}
	r.j.event(p.Key, r.n.name, "complete token %d with %d writes: %s", p.Token, n, errText(err))
	if err == nil {
		r.acked("complete", p.Holder, func(c claimstore.Claim) bool { return c.Status == claimstore.StatusCompleted })
	}
	return err
}

func (r *recorder) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	r.j.ended(p.Holder) // the holder has given up
	err := r.inner.Release(ctx, p)
	r.j.event(p.Key, r.n.name, "release token %d: %s", p.Token, errText(err))
	if err == nil {
		r.acked("release", p.Holder, func(c claimstore.Claim) bool { return c.Status != claimstore.StatusInProgress })
	}
	return err
}

func (r *recorder) Get(ctx context.Context, key string) (claimstore.Claim, error) {
	return r.inner.Get(ctx, key)
}

// gatedStore is a worker's claim store client behind its gate.
type gatedStore struct {
	n     *node
	inner *FaultyStore
	// stallAt returns how long the process pauses as it starts op on key, or 0.
	stallAt func(op, key string) time.Duration
}

func (g gatedStore) pause(op, key string) {
	if g.stallAt == nil {
		return
	}
	if d := g.stallAt(op, key); d > 0 {
		g.n.stall(time.Now().Add(d))
	}
}

var (
	_ claimstore.Store       = gatedStore{}
	_ claimstore.TxCompleter = gatedStore{}
)

func (g gatedStore) Acquire(ctx context.Context, p claimstore.AcquireParams) (a claimstore.Acquisition, err error) {
	err = g.n.call(func() error { a, err = g.inner.Acquire(ctx, p); return err })
	return a, err
}

func (g gatedStore) Renew(ctx context.Context, p claimstore.RenewParams) error {
	return g.n.call(func() error { return g.inner.Renew(ctx, p) })
}

func (g gatedStore) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	g.pause("complete", p.Key)
	return g.n.call(func() error { return g.inner.Complete(ctx, p) })
}

func (g gatedStore) CompleteTx(ctx context.Context, p claimstore.CompleteParams, w claimstore.TxWrites) error {
	g.pause("complete", p.Key)
	return g.n.call(func() error { return g.inner.CompleteTx(ctx, p, w) })
}

func (g gatedStore) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	return g.n.call(func() error { return g.inner.Release(ctx, p) })
}

func (g gatedStore) Get(ctx context.Context, key string) (c claimstore.Claim, err error) {
	err = g.n.call(func() error { c, err = g.inner.Get(ctx, key); return err })
	return c, err
}

// report adds the violations recorded to r, naming each key once, and the
// faults injected.
func (j *journal) report(r *Result) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, v := range j.violations {
		r.Violations = append(r.Violations, v.key+": "+v.what)
		if !slices.Contains(r.Keys, v.key) {
			r.Keys = append(r.Keys, v.key)
		}
	}
	r.Injected = maps.Clone(j.injected)
}
