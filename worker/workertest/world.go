package workertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/worker"
)

// Body is the suite's message body, JSON: the idempotency key, a payload
// that is the claim's fingerprint, and a sequence number within a group.
type Body struct {
	Key     string `json:"key"`
	Payload string `json:"payload"`
	Seq     int    `json:"seq,omitempty"`
}

// String is the body as sent.
func (b Body) String() string {
	s, _ := json.Marshal(b)
	return string(s)
}

// errNoKey is the decoder's refusal of a body without a key.
var errNoKey = errors.New("workertest: body has no key")

// decoder is the suite's: JSON Body, keyed by Key, fingerprinted by
// Payload; anything else is poison. It counts decodes per body.
func (s *scenario) decoder() worker.Decoder {
	return worker.DecoderFunc(func(m *worker.Message) error {
		s.mu.Lock()
		s.decodes[m.Body]++
		s.mu.Unlock()
		var b Body
		if err := json.Unmarshal([]byte(m.Body), &b); err != nil {
			return worker.Permanent("workertest: undecodable body", err)
		}
		if b.Key == "" {
			return worker.Permanent("workertest: undecodable body", errNoKey)
		}
		m.Key, m.Fingerprint, m.Payload = b.Key, b.Payload, b
		return nil
	})
}

// Behaviour is what the counting handler does on one run of a key: it
// may call r.Effect (the provider's charge), wait, and returns the run's
// result.
type Behaviour func(ctx context.Context, r *Run) (string, error)

// Run is one run of the handler.
type Run struct {
	// Key is the message's idempotency key.
	Key string
	// Body is the decoded body.
	Body Body
	// N is which run of the key this is, from 1, across consumers.
	N int

	s        *scenario
	consumer *incarnation
	ended    atomic.Bool
}

// Effect performs the run's effect: a call to the provider, counted per
// key. A dead consumer's call never arrives.
func (r *Run) Effect() {
	if r.consumer.dead() {
		return
	}
	r.s.mu.Lock()
	r.s.effects[r.Key]++
	r.s.order[r.Body.Payload] = append(r.s.order[r.Body.Payload], r.Body.Seq)
	r.s.mu.Unlock()
}

// succeed is the plain behaviour: one effect, result "done:<key>".
func succeed(_ context.Context, r *Run) (string, error) {
	r.Effect()
	return "done:" + r.Key, nil
}

// incarnation is one consumer as the suite knows it: alive until the
// harness says it is dead.
type incarnation struct {
	c atomic.Pointer[consumerBox]
}

type consumerBox struct{ Consumer }

func (i *incarnation) dead() bool {
	b := i.c.Load()
	return b != nil && b.Dead()
}

// scenario is one scenario's world: its harness, its fault-injecting store,
// its behaviours and counts.
type scenario struct {
	t     T
	h     Harness
	store *faultStore
	tm    Timing

	mu         sync.Mutex
	behaviours map[string]Behaviour // by key; succeed when absent
	runs       map[string][]*Run
	maxOverlap map[string]int
	effects    map[string]int
	decodes    map[string]int   // by body
	replays    map[string]int   // by key
	order      map[string][]int // effects' Seq by Payload (the group)
}

func newScenario(t T, h Harness) *scenario {
	t.Helper()
	s := &scenario{
		t: t, h: h, tm: h.Timing(), store: &faultStore{Store: h.Store()},
		behaviours: map[string]Behaviour{}, runs: map[string][]*Run{}, maxOverlap: map[string]int{},
		effects: map[string]int{}, decodes: map[string]int{}, replays: map[string]int{}, order: map[string][]int{},
	}
	return s
}

// keyOf is a key unique to the scenario.
func (s *scenario) keyOf(name string) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(s.t.Name()) + "-" + name
}

// on sets key's behaviour.
func (s *scenario) on(key string, b Behaviour) {
	s.mu.Lock()
	s.behaviours[key] = b
	s.mu.Unlock()
}

// protocol is the worker protocol a consumer of this scenario runs.
func (s *scenario) protocol(inc *incarnation) worker.Protocol {
	return worker.Protocol{
		Store:   s.store,
		Decoder: s.decoder(),
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) (string, error) {
			b, _ := m.Payload.(Body)
			r := s.begin(b, inc)
			defer r.ended.Store(true)
			s.mu.Lock()
			behave := s.behaviours[r.Key]
			s.mu.Unlock()
			if behave == nil {
				behave = succeed
			}
			return behave(ctx, r)
		}),
		OnReplay: func(_ context.Context, r worker.Replay) {
			s.mu.Lock()
			s.replays[r.Key]++
			s.mu.Unlock()
		},
		Logger: slog.New(slog.DiscardHandler),
	}
}

// begin records a run's start and how many runs of its key are running
// with it in live consumers.
func (s *scenario) begin(b Body, inc *incarnation) *Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &Run{Key: b.Key, Body: b, N: len(s.runs[b.Key]) + 1, s: s, consumer: inc}
	running := 1
	for _, o := range s.runs[b.Key] {
		if !o.ended.Load() && !o.consumer.dead() {
			running++
		}
	}
	s.runs[b.Key] = append(s.runs[b.Key], r)
	s.maxOverlap[b.Key] = max(s.maxOverlap[b.Key], running)
	return r
}

// start starts a consumer.
func (s *scenario) start() Consumer {
	s.t.Helper()
	inc := &incarnation{}
	c, err := s.h.Start(s.t.Context(), s.protocol(inc))
	if err != nil {
		s.t.Fatalf("start a consumer: %v", err)
	}
	inc.c.Store(&consumerBox{c})
	return c
}

// send sends bodies, each its own message.
func (s *scenario) send(msgs ...Message) {
	s.t.Helper()
	for _, m := range msgs {
		if err := s.h.Send(s.t.Context(), m); err != nil {
			s.t.Fatalf("send %.80s: %v", m.Body, err)
		}
	}
}

// need skips the scenario when the harness declares c absent; otherwise it
// runs, and a harness method that cannot do c fails it.
func (s *scenario) need(cs ...Capability) {
	s.t.Helper()
	for _, c := range cs {
		if why := s.h.Absent(c); why != "" {
			s.t.Skipf("the transport declares %s absent: %s", c, why)
		}
	}
}

// waitRunsEnded waits until every run of key has returned or lost its
// process, so that late effects are counted.
func (s *scenario) waitRunsEnded(key string, within time.Duration) {
	s.t.Helper()
	s.waitFor("the runs of "+key+" to end", within, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range s.runs[key] {
			if !r.ended.Load() && !r.consumer.dead() {
				return false
			}
		}
		return true
	})
}

// counts of one key, read together.
type counts struct {
	runs, effects, replays, overlap int
}

func (s *scenario) counts(key string) counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return counts{runs: len(s.runs[key]), effects: s.effects[key], replays: s.replays[key], overlap: s.maxOverlap[key]}
}

func (s *scenario) decodesOf(body string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.decodes[body]
}

// waitFor polls cond every 100ms until it holds or within has passed,
// then fails the scenario naming what.
func (s *scenario) waitFor(what string, within time.Duration, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("waited %s for %s", within, what)
		}
		select {
		case <-s.t.Context().Done():
			s.t.Fatalf("waiting for %s: %v", what, s.t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// settleWithin is how long the suite waits for messages to be settled:
// several redeliveries.
func (s *scenario) settleWithin() time.Duration { return 8*s.tm.Redelivery + 20*time.Second }

// waitSettled waits until every message is acked or dead-lettered, and
// each of bodies was acked (once at least).
func (s *scenario) waitSettled(bodies ...string) {
	s.t.Helper()
	var last string
	deadline := time.Now().Add(s.settleWithin())
	for {
		n, err := s.h.Unsettled(s.t.Context())
		if err != nil {
			s.t.Fatalf("unsettled: %v", err)
		}
		missing := s.notAcked(bodies)
		if n == 0 && len(missing) == 0 {
			return
		}
		last = fmt.Sprintf("%d messages unsettled, not acked: %.200q", n, missing)
		if time.Now().After(deadline) {
			s.t.Fatalf("not settled after %s: %s", s.settleWithin(), last)
		}
		select {
		case <-s.t.Context().Done():
			s.t.Fatalf("waiting to settle (%s): %v", last, s.t.Context().Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (s *scenario) notAcked(bodies []string) []string {
	s.t.Helper()
	acked, err := s.h.Acked(s.t.Context())
	if err != nil {
		s.t.Fatalf("acked: %v", err)
	}
	var missing []string
	for _, b := range bodies {
		if !slices.Contains(acked, b) {
			missing = append(missing, b)
		}
	}
	return missing
}

// acks returns how many times body was acked.
func (s *scenario) acks(body string) int {
	s.t.Helper()
	acked, err := s.h.Acked(s.t.Context())
	if err != nil {
		s.t.Fatalf("acked: %v", err)
	}
	n := 0
	for _, b := range acked {
		if b == body {
			n++
		}
	}
	return n
}

// deadLetters returns the dead letters, sorted by body.
func (s *scenario) deadLetters() []DeadLetter {
	s.t.Helper()
	dl, err := s.h.DeadLetters(s.t.Context())
	if err != nil {
		s.t.Fatalf("dead letters: %v", err)
	}
	sort.Slice(dl, func(i, j int) bool { return dl[i].Body < dl[j].Body })
	return dl
}

// wantNoDeadLetters fails the scenario if anything was dead-lettered.
func (s *scenario) wantNoDeadLetters() {
	s.t.Helper()
	if dl := s.deadLetters(); len(dl) > 0 {
		s.t.Errorf("%d messages dead-lettered, want none: %+v", len(dl), dl)
	}
}

// wantOnce fails the scenario unless key ran to one effect, its runs never
// overlapping, and its claim is completed.
func (s *scenario) wantOnce(key string) {
	s.t.Helper()
	c := s.counts(key)
	if c.effects != 1 {
		s.t.Errorf("key %s: %d effects, want 1 (%d runs)", key, c.effects, c.runs)
	}
	if c.overlap > 1 {
		s.t.Errorf("key %s: %d runs at once, want never more than 1", key, c.overlap)
	}
	s.wantClaim(key, claimstore.StatusCompleted)
}

// wantClaim fails the scenario unless key's claim has status st.
func (s *scenario) wantClaim(key string, st claimstore.Status) claimstore.Claim {
	s.t.Helper()
	c, err := s.h.Store().Get(s.t.Context(), key)
	if err != nil {
		s.t.Errorf("claim %s: %v", key, err)
		return c
	}
	if c.Status != st {
		s.t.Errorf("claim %s: status %s, want %s", key, c.Status, st)
	}
	return c
}

// faultStore is the scenario's claim store: the harness's, with faults the
// suite switches: every call failing (an outage), or renewals alone.
type faultStore struct {
	claimstore.Store
	down      atomic.Bool
	renewDown atomic.Bool
	failed    atomic.Int64 // calls failed by a fault
	renewed   atomic.Int64 // renewals that reached the store

	mu       sync.Mutex
	answered map[string]int // acquisitions the store answered, by key
}

// acquires returns how many acquisitions of key the store answered.
func (f *faultStore) acquires(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answered[key]
}

// errStoreDown is the injected store failure: a backend error, retryable.
var errStoreDown = errors.New("workertest: injected store outage")

func (f *faultStore) fail(renew bool) error {
	if f.down.Load() || (renew && f.renewDown.Load()) {
		f.failed.Add(1)
		return errStoreDown
	}
	return nil
}

func (f *faultStore) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	if err := f.fail(false); err != nil {
		return claimstore.Acquisition{}, err
	}
	a, err := f.Store.Acquire(ctx, p)
	if err == nil {
		f.mu.Lock()
		if f.answered == nil {
			f.answered = map[string]int{}
		}
		f.answered[p.Key]++
		f.mu.Unlock()
	}
	return a, err
}

func (f *faultStore) Renew(ctx context.Context, p claimstore.RenewParams) error {
	if err := f.fail(true); err != nil {
		return err
	}
	f.renewed.Add(1)
	return f.Store.Renew(ctx, p)
}

func (f *faultStore) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	if err := f.fail(false); err != nil {
		return err
	}
	return f.Store.Complete(ctx, p)
}

func (f *faultStore) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	if err := f.fail(false); err != nil {
		return err
	}
	return f.Store.Release(ctx, p)
}
