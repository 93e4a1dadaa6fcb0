package workertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
)

// Scenario is one named scenario of the suite.
type Scenario struct {
	// Name is the subtest's name.
	Name string
	// Run is the scenario.
	Run func(t T, h Harness)
	// Options are the harness options it needs.
	Options Options
}

// Scenarios returns every scenario, in the order of the package doc.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "DuplicateWhileRunning", Run: DuplicateWhileRunning},
		{Name: "CrashBeforeAck", Run: CrashBeforeAck},
		{Name: "FailureThenSuccess", Run: FailureThenSuccess},
		{Name: "Poison", Run: Poison},
		{Name: "KeyReused", Run: KeyReused},
		{Name: "ResultTooLarge", Run: ResultTooLarge},
		{Name: "RenewalBlip", Run: RenewalBlip},
		{Name: "ShutdownOverrun", Run: ShutdownOverrun},
		{Name: "LostAck", Run: LostAck},
		{Name: "StoreOutage", Run: StoreOutage},
		{Name: "BrokerOutage", Run: BrokerOutage},
		{Name: "Ordering", Run: Ordering, Options: Options{Ordered: true}},
	}
}

// RunAll runs every scenario as a parallel subtest of t, each with a
// harness of its own from newHarness.
func RunAll(t *testing.T, newHarness NewHarness) {
	t.Helper()
	for _, sc := range Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			sc.Run(t, newHarness(t, sc.Options))
			t.Logf("%s: %s", sc.Name, time.Since(start).Round(100*time.Millisecond))
		})
	}
}

// waitUntil blocks until cond holds or d passes or ctx ends, polling; it
// reports whether cond held.
func waitUntil(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// sleep waits d, ignoring the handler's context as a handler that does not
// watch it would.
func sleep(d time.Duration) { time.Sleep(d) }

// DuplicateWhileRunning sends a message and a copy of it (a producer's
// retry); the first run waits until the store has answered the copy's
// acquisition while it runs, and a little more. One run, one effect, both
// copies acked, nothing dead-lettered.
func DuplicateWhileRunning(t T, h Harness) {
	s := newScenario(t, h)
	key := s.keyOf("dup")
	body := Body{Key: key, Payload: "p"}.String()
	copyDelivered := make(chan bool, 1)
	s.on(key, func(ctx context.Context, r *Run) (string, error) {
		r.Effect()
		during := waitUntil(ctx, s.tm.Lease/2, func() bool { return s.store.acquires(key) >= 2 })
		sleep(s.tm.Lease / 10) // time for a run the copy's answer let start
		copyDelivered <- during
		return "done", nil
	})
	s.send(Message{Body: body}, Message{Body: body}) // both waiting: one receive may take both
	s.start()
	var during bool
	select {
	case during = <-copyDelivered:
	case <-time.After(s.settleWithin()):
		t.Fatalf("the handler never ran")
	}
	if !during {
		t.Errorf("the copy's acquisition was not answered while the first run ran (%s): the scenario did not happen", s.tm.Lease/2)
	}
	s.waitFor("both copies acked", s.settleWithin(), func() bool { return s.acks(body) >= 2 })
	s.waitSettled(body)
	s.wantOnce(key)
	if c := s.counts(key); c.runs != 1 || c.replays < 1 {
		t.Errorf("runs %d, replays %d: want 1 run, the copy settled as a duplicate", c.runs, c.replays)
	}
	s.wantNoDeadLetters()
}

// CrashBeforeAck lets a consumer run the effect and complete, then kills it
// at its ack, before the broker hears it; a restarted consumer gets the
// redelivery and settles it as a duplicate. One effect, one run.
func CrashBeforeAck(t T, h Harness) {
	s := newScenario(t, h)
	s.need(CanCrashAtAck, CanRedeliver)
	key := s.keyOf("crash")
	body := Body{Key: key, Payload: "p"}.String()
	c1 := s.start()
	c1.CrashAtAck()
	s.send(Message{Body: body})
	s.waitFor("the first consumer to die at its ack", s.settleWithin(), c1.Dead)
	if n := s.acks(body); n != 0 {
		t.Fatalf("acked %d times before the crash at the ack: the crash came too late", n)
	}
	s.wantClaim(key, claimstore.StatusCompleted)
	s.start()
	if err := h.Redeliver(t.Context()); err != nil {
		t.Fatalf("redeliver: %v", err)
	}
	s.waitSettled(body)
	s.wantOnce(key)
	if c := s.counts(key); c.runs != 1 || c.replays < 1 {
		t.Errorf("runs %d, replays %d: want 1 run, the redelivery settled as a duplicate", c.runs, c.replays)
	}
	s.wantNoDeadLetters()
}

// errTransient is a handler's retryable failure.
var errTransient = errors.New("workertest: transient failure")

// FailureThenSuccess fails the first run retryably (before its effect) and
// lets the second succeed: two runs, one effect, completed, acked, nothing
// dead-lettered.
func FailureThenSuccess(t T, h Harness) {
	s := newScenario(t, h)
	key := s.keyOf("retry")
	body := Body{Key: key, Payload: "p"}.String()
	s.on(key, func(ctx context.Context, r *Run) (string, error) {
		if r.N == 1 {
			return "", errTransient
		}
		return succeed(ctx, r)
	})
	s.start()
	s.send(Message{Body: body})
	s.waitSettled(body)
	s.wantOnce(key)
	if c := s.counts(key); c.runs != 2 {
		t.Errorf("%d runs, want 2: the failure retried once", c.runs)
	}
	s.wantNoDeadLetters()
}

// Poison sends a body the decoder refuses beside a good message: the poison
// is dead-lettered at its first delivery with the decoder's reason and never
// reaches the handler; the good one is done once.
func Poison(t T, h Harness) {
	s := newScenario(t, h)
	key := s.keyOf("good")
	good := Body{Key: key, Payload: "p"}.String()
	poison := `{"key": 42, "poison": "` + s.keyOf("poison") + `"}`
	s.start()
	s.send(Message{Body: poison}, Message{Body: good})
	s.waitSettled(good)
	dl := s.deadLetters()
	if len(dl) != 1 || dl[0].Body != poison {
		t.Fatalf("dead letters %+v, want the poison body alone", dl)
	}
	if !strings.Contains(dl[0].Reason, "undecodable body") {
		t.Errorf("dead-letter reason %q, want the decoder's (undecodable body)", dl[0].Reason)
	}
	if n := s.decodesOf(poison); n != 1 {
		t.Errorf("the poison body was decoded %d times, want 1: dead-lettered at its first delivery", n)
	}
	if n := s.acks(poison); n != 0 {
		t.Errorf("the poison body was acked %d times, want 0 (dead-lettered instead)", n)
	}
	s.mu.Lock()
	handled := len(s.runs)
	s.mu.Unlock()
	if handled != 1 {
		t.Errorf("the handler ran for %d keys, want 1 (the good message's)", handled)
	}
	s.wantOnce(key)
}

// KeyReused sends a key, waits for it to complete, then sends the same key
// with another payload: the second is dead-lettered with a reason naming
// the key, never run; the first's effect and stored result stand.
func KeyReused(t T, h Harness) {
	s := newScenario(t, h)
	key := s.keyOf("reused")
	first := Body{Key: key, Payload: "first"}.String()
	second := Body{Key: key, Payload: "second"}.String()
	s.start()
	s.send(Message{Body: first})
	s.waitSettled(first)
	s.send(Message{Body: second})
	s.waitFor("the reuse to be dead-lettered", s.settleWithin(), func() bool { return len(s.deadLetters()) > 0 })
	s.waitSettled(first)
	dl := s.deadLetters()
	if len(dl) != 1 || dl[0].Body != second {
		t.Fatalf("dead letters %+v, want the second payload alone", dl)
	}
	if !strings.Contains(dl[0].Reason, key) {
		t.Errorf("dead-letter reason %q does not name the key %s", dl[0].Reason, key)
	}
	if c := s.counts(key); c.runs != 1 {
		t.Errorf("%d runs, want 1: the reuse must not run", c.runs)
	}
	s.wantOnce(key)
	if c := s.wantClaim(key, claimstore.StatusCompleted); c.Result != "done:"+key || c.Fingerprint != "first" {
		t.Errorf("claim result %q fingerprint %q, want the first's (done:%s, first)", c.Result, c.Fingerprint, key)
	}
}

// ResultTooLarge returns a result larger than a claim can store: one
// effect, acked, the claim completed (without the result); a later copy is
// acked as a duplicate without a run.
func ResultTooLarge(t T, h Harness) {
	s := newScenario(t, h)
	key := s.keyOf("large")
	body := Body{Key: key, Payload: "p"}.String()
	s.on(key, func(_ context.Context, r *Run) (string, error) {
		r.Effect()
		return strings.Repeat("x", claimstore.MaxResultBytes+1), nil
	})
	s.start()
	s.send(Message{Body: body})
	s.waitSettled(body)
	s.wantOnce(key)
	s.send(Message{Body: body})
	s.waitFor("the copy to be acked", s.settleWithin(), func() bool { return s.acks(body) >= 2 })
	s.waitSettled(body)
	if c := s.counts(key); c.runs != 1 || c.effects != 1 || c.replays < 1 {
		t.Errorf("runs %d, effects %d, replays %d: want 1, 1 and the copy a duplicate", c.runs, c.effects, c.replays)
	}
	s.wantNoDeadLetters()
}

// RenewalBlip makes the store fail every renewal from the handler's start
// for one and a half leases (store errors, not a lost lease) while the
// handler runs two leases and succeeds: that run completes, one effect,
// acked, no second run. Where a handler cannot outlive its lease
// (Timing.MaxRun), the run lasts four fifths of MaxRun and the blip the
// first three quarters of it: whatever the transport renews in that time
// fails, and the run must still complete.
func RenewalBlip(t T, h Harness) {
	s := newScenario(t, h)
	s.need(CompletesAfterRenewalBlip)
	key := s.keyOf("blip")
	body := Body{Key: key, Payload: "p"}.String()
	run := 2 * s.tm.Lease
	if s.tm.MaxRun > 0 {
		run = min(run, s.tm.MaxRun*4/5)
	}
	s.on(key, func(ctx context.Context, r *Run) (string, error) {
		if r.N > 1 {
			return succeed(ctx, r) // a second run is the failure the checks below report
		}
		s.store.renewDown.Store(true)
		r.Effect()
		sleep(run * 3 / 4)
		s.store.renewDown.Store(false)
		sleep(run / 4)
		return "done:" + r.Key, nil
	})
	s.start()
	s.send(Message{Body: body})
	s.waitSettled(body)
	s.wantOnce(key)
	if c := s.counts(key); c.runs != 1 {
		t.Errorf("%d runs, want 1: the first run's success completes", c.runs)
	}
	s.wantNoDeadLetters()
	t.Logf("renewals failed by the blip: %d", s.store.failed.Load())
}

// ShutdownOverrun stops the consumer while a handler runs and ignores its
// cancelled context for the shutdown timeout and two redeliveries more,
// the process living on; a new consumer starts at once. The key's runs
// never overlap, and it has one effect (the abandoned run's, at its end,
// when its process lives on; else the next run's).
func ShutdownOverrun(t T, h Harness) {
	s := newScenario(t, h)
	s.need(NoOverlapAfterShutdown)
	key := s.keyOf("overrun")
	body := Body{Key: key, Payload: "p"}.String()
	running := make(chan struct{}, 1)
	s.on(key, func(ctx context.Context, r *Run) (string, error) {
		if r.N > 1 {
			return succeed(ctx, r)
		}
		running <- struct{}{}
		sleep(s.tm.Shutdown + 2*s.tm.Redelivery + 2*s.tm.Lease)
		r.Effect() // at the end: a process killed before (a Lambda at its deadline) has none
		return "done:" + r.Key, nil
	})
	c1 := s.start()
	s.send(Message{Body: body})
	select {
	case <-running:
	case <-time.After(s.settleWithin()):
		t.Fatalf("the handler never ran")
	}
	stopped := time.Now()
	err := c1.Stop(t.Context())
	t.Logf("the first consumer stopped after %s: %v", time.Since(stopped).Round(time.Millisecond), err)
	s.start()
	s.waitSettled(body)
	s.waitRunsEnded(key, s.settleWithin())
	c := s.counts(key)
	if c.overlap > 1 {
		t.Errorf("the key ran %d times at once: the next consumer's run overlapped the abandoned one", c.overlap)
	}
	s.wantOnce(key)
	s.wantNoDeadLetters()
}

// LostAck loses every ack until one was lost after the key completed: the
// redelivery is settled as a duplicate; one run, one effect.
func LostAck(t T, h Harness) {
	s := newScenario(t, h)
	s.need(CanLoseAcks, CanRedeliver)
	key := s.keyOf("lostack")
	body := Body{Key: key, Payload: "p"}.String()
	if _, err := h.LoseAcks(true); err != nil {
		t.Fatalf("lose acks: %v", err)
	}
	s.start()
	s.send(Message{Body: body})
	s.waitFor("an ack to be lost", s.settleWithin(), func() bool {
		n, err := h.LoseAcks(true)
		return err == nil && n > 0
	})
	if n := s.acks(body); n != 0 {
		t.Fatalf("acked %d times while acks were lost", n)
	}
	// The redelivery comes while acks are still lost (a transport may retry
	// a failed ack itself, which would settle the message without one).
	if err := h.Redeliver(t.Context()); err != nil {
		t.Fatalf("redeliver: %v", err)
	}
	s.waitFor("the redelivery", s.settleWithin(), func() bool { return s.decodesOf(body) >= 2 })
	if n, err := h.LoseAcks(false); err != nil || n == 0 {
		t.Fatalf("lose acks off: %d lost, %v", n, err)
	}
	s.waitSettled(body)
	s.wantOnce(key)
	if c := s.counts(key); c.runs != 1 || c.replays < 1 {
		t.Errorf("runs %d, replays %d: want 1 run, the redelivery settled as a duplicate", c.runs, c.replays)
	}
	s.wantNoDeadLetters()
}

// StoreOutage fails every store call for two redeliveries while messages
// arrive: nothing is dead-lettered, and after the outage each message is
// done once.
func StoreOutage(t T, h Harness) {
	s := newScenario(t, h)
	const n = 5
	var bodies []string
	var keys []string
	for i := range n {
		key := s.keyOf(fmt.Sprintf("outage%d", i))
		keys = append(keys, key)
		bodies = append(bodies, Body{Key: key, Payload: "p"}.String())
	}
	s.store.down.Store(true)
	s.start()
	for _, b := range bodies {
		s.send(Message{Body: b})
	}
	s.waitFor("the outage to fail a store call", s.settleWithin(), func() bool { return s.store.failed.Load() > 0 })
	sleep(2 * s.tm.Redelivery)
	s.store.down.Store(false)
	t.Logf("store calls failed by the outage: %d", s.store.failed.Load())
	s.waitSettled(bodies...)
	for _, k := range keys {
		s.wantOnce(k)
	}
	s.wantNoDeadLetters()
}

// BrokerOutage cuts the consumer off the broker for two redeliveries, with
// messages handled before, sent during and after it: nothing is lost, each
// message is done once, nothing dead-lettered.
func BrokerOutage(t T, h Harness) {
	s := newScenario(t, h)
	s.need(CanBrokerOutage)
	var bodies, keys []string
	msg := func(i int) Message {
		key := s.keyOf(fmt.Sprintf("broker%d", i))
		keys = append(keys, key)
		b := Body{Key: key, Payload: "p"}.String()
		bodies = append(bodies, b)
		return Message{Body: b}
	}
	// The third run spans the outage's start: its ack falls in the outage.
	s.on(s.keyOf("broker2"), func(ctx context.Context, r *Run) (string, error) {
		sleep(s.tm.Lease / 3)
		return succeed(ctx, r)
	})
	s.start()
	s.send(msg(0), msg(1), msg(2))
	s.waitFor("the first messages to run", s.settleWithin(), func() bool { return s.counts(keys[2]).runs > 0 })
	if err := h.BrokerOutage(true); err != nil {
		t.Fatalf("broker outage: %v", err)
	}
	s.send(msg(3), msg(4))
	sleep(2 * s.tm.Redelivery)
	if err := h.BrokerOutage(false); err != nil {
		t.Fatalf("broker outage off: %v", err)
	}
	s.send(msg(5))
	s.waitSettled(bodies...)
	for _, k := range keys {
		s.wantOnce(k)
	}
	s.wantNoDeadLetters()
}

// Ordering sends two groups of four messages each, interleaved, on a
// queue that keeps groups in order; the first message of each group fails
// once and the second is slow: each group's effects happen in the order
// sent, each once.
func Ordering(t T, h Harness) {
	s := newScenario(t, h)
	s.need(Ordered)
	const perGroup = 4
	groups := []string{s.keyOf("g1"), s.keyOf("g2")}
	var bodies, keys []string
	var msgs []Message
	for seq := 1; seq <= perGroup; seq++ {
		for _, g := range groups {
			key := fmt.Sprintf("%s-%d", g, seq)
			b := Body{Key: key, Payload: g, Seq: seq}.String()
			keys, bodies = append(keys, key), append(bodies, b)
			msgs = append(msgs, Message{Body: b, Group: g})
			switch seq {
			case 1:
				s.on(key, func(ctx context.Context, r *Run) (string, error) {
					if r.N == 1 {
						return "", errTransient
					}
					return succeed(ctx, r)
				})
			case 2:
				s.on(key, func(ctx context.Context, r *Run) (string, error) {
					sleep(s.tm.Lease / 3)
					return succeed(ctx, r)
				})
			}
		}
	}
	s.start()
	s.send(msgs...)
	s.waitSettled(bodies...)
	for _, k := range keys {
		s.wantOnce(k)
	}
	s.wantNoDeadLetters()
	want := []int{1, 2, 3, 4}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range groups {
		if got := s.order[g]; !slices.Equal(got, want) {
			t.Errorf("group %s: effects in order %v, want %v", g, got, want)
		}
	}
}
