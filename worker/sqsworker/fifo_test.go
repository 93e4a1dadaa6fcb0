package sqsworker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/claimstoretest"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
)

// fifoBatch is a delivery of messages "<group><n>" for the scheduler
// tests, in the order given.
type fifoBatch struct {
	ids    []string
	groups []string
}

func newFIFOBatch(ids ...string) fifoBatch {
	b := fifoBatch{ids: ids}
	for _, id := range ids {
		b.groups = append(b.groups, id[:1])
	}
	return b
}

// interleaved returns groups x n messages, round robin: A0 B0 C0 A1 B1 ...
func interleaved(groups string, n int) fifoBatch {
	var ids []string
	for i := range n {
		for _, g := range groups {
			ids = append(ids, fmt.Sprintf("%c%d", g, i))
		}
	}
	return newFIFOBatch(ids...)
}

// fixture is the protocol over a memory store on a test clock, for the
// scheduler's tests; p may be changed until the first schedule.
type fixture struct {
	clock   *claimstoretest.Clock
	store   *memory.Store
	metrics *worker.Metrics
	p       worker.Protocol
	e       *worker.Engine
}

func newFixture(h worker.Handler) *fixture {
	f := &fixture{clock: claimstoretest.NewClock(), metrics: worker.NewMetrics(nil)}
	f.store = memory.New(memory.Config{Now: f.clock.Now})
	f.p = worker.Protocol{
		Store: f.store, Handler: h, Owner: "test", Retention: 24 * time.Hour, MinRetryBackoff: time.Second,
		MaxRetryBackoff: time.Minute, Metrics: f.metrics, Now: f.clock.Now, Logger: slog.New(slog.DiscardHandler),
	}
	return f
}

// schedule runs b through the scheduler with f's processor (the memory
// store) at most limit groups at once, as both transports do: a message is
// done when acked or dead-lettered. It returns the skipped message ids.
func (f *fixture) schedule(b fifoBatch, limit int) []string {
	var mu sync.Mutex
	var skipped []string
	if f.e == nil {
		e, err := worker.NewEngine(f.p, worker.EngineOptions{})
		if err != nil {
			panic(err)
		}
		f.e = e
	}
	runs := groupRuns(len(b.ids), true, func(i int) string { return b.groups[i] })
	runGroups(runs, limit, func(i int) bool {
		d := f.e.Process(context.Background(), &worker.Message{ID: b.ids[i], Body: "{}", Attempt: 1}, worker.Hold{Until: f.clock.Now().Add(30 * time.Second)})
		return d.Action == worker.Ack || d.Action == worker.DeadLetter
	}, func(_ int, rest []int) {
		mu.Lock()
		defer mu.Unlock()
		for _, i := range rest {
			skipped = append(skipped, b.ids[i])
		}
	})
	slices.Sort(skipped)
	return skipped
}

// recorder is a handler that records the order messages ran in, per
// group, and how many of one group ever ran at once.
type recorder struct {
	mu        sync.Mutex
	order     map[string][]string
	running   map[string]int
	maxGroup  int // most messages of one group running at once
	total     int
	maxTotal  int // most messages running at once
	before    func(ctx context.Context, m *worker.Message) error
	processed []string
}

func newRecorder() *recorder {
	return &recorder{order: map[string][]string{}, running: map[string]int{}}
}

func (r *recorder) Handle(ctx context.Context, m *worker.Message) (string, error) {
	g := m.ID[:1]
	r.mu.Lock()
	r.running[g]++
	r.total++
	r.maxGroup = max(r.maxGroup, r.running[g])
	r.maxTotal = max(r.maxTotal, r.total)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running[g]--
		r.total--
		r.mu.Unlock()
	}()
	var err error
	if r.before != nil {
		err = r.before(ctx, m)
	} else {
		time.Sleep(time.Millisecond) // let other goroutines in
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.processed = append(r.processed, m.ID)
	if err != nil {
		return "", err
	}
	r.order[g] = append(r.order[g], m.ID)
	return "ok " + m.ID, nil
}

// TestFIFOOrder: every group's messages are handled one at a time, in
// delivery order, and all of them complete.
func TestFIFOOrder(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	f := newFixture(rec)
	b := interleaved("ABCD", 6)
	if skipped := f.schedule(b, 4); len(skipped) != 0 {
		t.Fatalf("skipped %v, want none", skipped)
	}
	for _, g := range "ABCD" {
		var want []string
		for i := range 6 {
			want = append(want, fmt.Sprintf("%c%d", g, i))
		}
		if got := rec.order[string(g)]; !slices.Equal(got, want) {
			t.Errorf("group %c ran %v, want %v", g, got, want)
		}
	}
	if rec.maxGroup != 1 {
		t.Errorf("up to %d messages of one group ran at once, want 1", rec.maxGroup)
	}
	if n := f.metrics.Count(worker.OutcomeCompleted); n != 24 {
		t.Errorf("completed %d, want 24", n)
	}
	for _, id := range b.ids {
		if c, err := f.store.Get(context.Background(), id); err != nil || c.Status != claimstore.StatusCompleted {
			t.Errorf("claim %s: %+v, %v; want completed", id, c, err)
		}
	}
}

// TestFIFOGroupsConcurrent: different groups run at the same time (each
// group's first message waits until every group's first is in), and never
// more groups than the limit.
func TestFIFOGroupsConcurrent(t *testing.T) {
	t.Parallel()
	t.Run("all groups at once", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder()
		var arrived sync.WaitGroup
		arrived.Add(3)
		all := make(chan struct{})
		go func() { arrived.Wait(); close(all) }()
		rec.before = func(_ context.Context, m *worker.Message) error {
			if m.ID[1:] != "0" {
				return nil
			}
			arrived.Done()
			select {
			case <-all:
				return nil
			case <-time.After(5 * time.Second):
				return errors.New("the other groups' first messages never ran alongside")
			}
		}
		f := newFixture(rec)
		if skipped := f.schedule(interleaved("ABC", 3), 10); len(skipped) != 0 {
			t.Fatalf("skipped %v: the groups did not run concurrently", skipped)
		}
		if rec.maxTotal < 3 {
			t.Errorf("at most %d messages ran at once, want 3 (one per group)", rec.maxTotal)
		}
		if rec.maxGroup != 1 {
			t.Errorf("up to %d messages of one group ran at once, want 1", rec.maxGroup)
		}
	})
	t.Run("limit", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder()
		rec.before = func(context.Context, *worker.Message) error { time.Sleep(5 * time.Millisecond); return nil }
		f := newFixture(rec)
		f.schedule(interleaved("ABCDEF", 3), 2)
		if rec.maxTotal != 2 {
			t.Errorf("at most %d messages ran at once, want 2 (the limit)", rec.maxTotal)
		}
		if len(rec.processed) != 18 {
			t.Errorf("%d handled, want 18", len(rec.processed))
		}
	})
}

// TestFIFOGroupBlocked: a message that is not done stops its group: the
// group's later messages are not started but skipped (returned), while the
// other groups run to the end. A dead-lettered message does not stop it.
func TestFIFOGroupBlocked(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		setup   func(f *fixture, rec *recorder)
		handled []string // of group A, in order (the blocked group)
		skipped []string
	}{
		{"handler failure", func(_ *fixture, rec *recorder) {
			rec.before = func(_ context.Context, m *worker.Message) error {
				if m.ID == "A1" {
					return errors.New("provider unavailable")
				}
				return nil
			}
		}, []string{"A0", "A1"}, []string{"A2", "A3"}},
		{"held elsewhere", func(f *fixture, _ *recorder) {
			if _, err := f.store.Acquire(context.Background(), claimstore.AcquireParams{
				Key: "A1", Owner: "other", LeaseUntil: f.clock.Now().Add(time.Minute), ExpiresAt: f.clock.Now().Add(time.Hour),
			}); err != nil {
				t.Fatal(err)
			}
		}, []string{"A0"}, []string{"A2", "A3"}},
		{"poison goes on", func(f *fixture, _ *recorder) {
			f.p.Decoder = worker.DecoderFunc(func(m *worker.Message) error {
				if m.ID == "A1" {
					return worker.Permanentf("not a payment")
				}
				return worker.KeyFromMessageID.Decode(m)
			})
		}, []string{"A0", "A2", "A3"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := newRecorder()
			f := newFixture(rec)
			tc.setup(f, rec)
			skipped := f.schedule(interleaved("AB", 4), 2)
			if !slices.Equal(skipped, tc.skipped) {
				t.Errorf("skipped %v, want %v", skipped, tc.skipped)
			}
			var handledA []string
			for _, id := range rec.processed {
				if id[0] == 'A' {
					handledA = append(handledA, id)
				}
			}
			if !slices.Equal(handledA, tc.handled) {
				t.Errorf("group A handled %v, want %v", handledA, tc.handled)
			}
			if got, want := rec.order["B"], []string{"B0", "B1", "B2", "B3"}; !slices.Equal(got, want) {
				t.Errorf("group B ran %v, want %v: another group's failure must not stop it", got, want)
			}
			for _, id := range tc.skipped {
				if _, err := f.store.Get(context.Background(), id); !errors.Is(err, claimstore.ErrNotFound) {
					t.Errorf("skipped %s has a claim (%v): it was started", id, err)
				}
			}
		})
	}
}

// TestGroupRunsStandard: without FIFO every message is its own run, group
// id or not (fair queues).
func TestGroupRunsStandard(t *testing.T) {
	t.Parallel()
	runs := groupRuns(4, false, func(int) string { return "same" })
	if len(runs) != 4 {
		t.Errorf("runs %v, want one per message", runs)
	}
	runs = groupRuns(5, true, func(i int) string { return []string{"B", "A", "B", "C", "A"}[i] })
	if want := [][]int{{0, 2}, {1, 4}, {3}}; !slices.EqualFunc(runs, want, slices.Equal) {
		t.Errorf("runs %v, want %v", runs, want)
	}
}

// TestLambdaFIFO: a batch [A0, A1, B0, A2, B1] from a FIFO queue whose A1
// fails: A1 and A2 are reported, A2 is never handled, B completes; the same
// batch from a standard queue handles A2 anyway.
func TestLambdaFIFO(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		arn      string
		reported []string
		handled  []string
	}{
		{"arn:aws:sqs:eu-west-1:000000000000:payments.fifo", []string{"A1", "A2"}, []string{"A0", "A1", "B0", "B1"}},
		{"arn:aws:sqs:eu-west-1:000000000000:payments", []string{"A1"}, []string{"A0", "A1", "A2", "B0", "B1"}},
	} {
		t.Run(tc.arn, func(t *testing.T) {
			t.Parallel()
			rec := newRecorder()
			rec.before = func(_ context.Context, m *worker.Message) error {
				if m.ID == "A1" {
					return errors.New("provider unavailable")
				}
				return nil
			}
			metrics := worker.NewMetrics(nil)
			l, err := NewLambda(context.Background(), LambdaConfig{
				Protocol: worker.Protocol{
					Store: memory.New(memory.Config{}), Handler: rec, Retention: time.Hour, Metrics: metrics, Logger: slog.New(slog.DiscardHandler),
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			var ev events.SQSEvent
			for _, id := range []string{"A0", "A1", "B0", "A2", "B1"} {
				ev.Records = append(ev.Records, events.SQSMessage{
					MessageId: id, Body: "{}", EventSourceARN: tc.arn,
					Attributes: map[string]string{"ApproximateReceiveCount": "1", groupAttribute: id[:1]},
				})
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := l.Handle(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			var reported []string
			for _, f := range resp.BatchItemFailures {
				reported = append(reported, f.ItemIdentifier)
			}
			slices.Sort(reported)
			if !slices.Equal(reported, tc.reported) {
				t.Errorf("reported %v, want %v", reported, tc.reported)
			}
			handled := slices.Clone(rec.processed)
			slices.Sort(handled)
			if !slices.Equal(handled, tc.handled) {
				t.Errorf("handled %v, want %v", handled, tc.handled)
			}
			if got := rec.order["A"]; strings.HasSuffix(tc.arn, ".fifo") && !slices.Equal(got, []string{"A0"}) {
				t.Errorf("group A completed %v, want [A0]", got)
			}
			if n, want := metrics.Count(worker.OutcomeSkipped), int64(len(tc.reported)-1); n != want {
				t.Errorf("skipped counted %d, want %d", n, want)
			}
		})
	}
}

func TestWarnFIFOReceives(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		q    QueueInfo
		warn bool
	}{
		{"FIFO with too few receives", QueueInfo{FIFO: true, MaxReceiveCount: 10}, true},
		{"FIFO with room", QueueInfo{FIFO: true, MaxReceiveCount: FIFOMaxReceiveCount}, false},
		{"FIFO without redrive policy", QueueInfo{FIFO: true}, false},
		{"standard queue", QueueInfo{MaxReceiveCount: 5}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			got := warnFIFOReceives(tc.q, slog.New(slog.NewTextHandler(&buf, nil)))
			if got != tc.warn || strings.Contains(buf.String(), "maxReceiveCount") != tc.warn {
				t.Errorf("warned %v (%q), want %v", got, buf.String(), tc.warn)
			}
		})
	}
}
