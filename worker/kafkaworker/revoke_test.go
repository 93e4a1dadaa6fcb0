package kafkaworker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
)

// TestNoCommitAfterRevoke: member A runs record R (offset 0, its handler
// held) and completes S (offset 1) when B joins; A's revoke grace runs out
// with R still running, and the partition moves to B, which finds R's key
// held, replays S and completes T (offset 2, produced after). Then R is let
// go: A completes it, and B replays it and commits the end, 3. Any commit
// of the partition A sends after that is held in the broker until B's
// commit of 3 is in, then let through. A correct member sends none: it
// forgot the partition when its revoke returned, and the group's committed
// offset stays at the end, 3. With the planted fault (A keeps committing
// the revoked partition as its records settle) A's late commit of 2 lands
// after B's 3 and rewinds the partition: T would be run again by the next
// owner, and with nothing more to commit B never moves it back.
//
// It runs kfake in process on its virtual network under synctest, with
// real kgo clients: the rebalance's seconds pass at once.
func TestNoCommitAfterRevoke(t *testing.T) {
	t.Parallel()
	for _, plant := range []bool{false, true} {
		t.Run(fmt.Sprintf("planted=%t", plant), func(t *testing.T) {
			t.Parallel()
			var final, most int64
			var late int
			synctest.Test(t, func(t *testing.T) { final, most, late = revokeScenario(t, plant) })
			t.Logf("committed offset at the end %d (the end offset 3; the highest seen %d); commits A sent after its revoke: %d", final, most, late)
			switch {
			case !plant && (final != 3 || late > 0):
				t.Errorf("committed offset %d at the end, want 3 (the partition's end); A committed %d times after its revoke", final, late)
			case plant && final == 3:
				t.Errorf("the planted fault (commit after revoke) was not caught: committed %d, A's late commits %d", final, late)
			}
		})
	}
}

// revokeScenario runs the scenario and returns the group's committed offset
// at the end, the highest it was seen at, and how many commits A sent after
// its revoke.
func revokeScenario(t *testing.T, plant bool) (final, most int64, late int) {
	const topic, group = "payments", "payments-g"
	var net kfake.VirtualNetwork
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(9092), kfake.ListenFn(net.Listen),
		kfake.SeedTopics(2, topic, topic+DeadLetterSuffix))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.Dialer(net.DialContext),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(part int32, keys ...string) {
		for _, k := range keys {
			k += fmt.Sprint(part)
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: part, Key: []byte(k), Value: []byte(k)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Two partitions, both A's until B joins; one then moves to B.
	produce(0, "R", "S")
	produce(1, "R", "S")

	store := memory.New(memory.Config{})
	started, letR := make(chan struct{}, 2), make(chan struct{})
	var letOnce, bOnce sync.Once
	bIn := make(chan struct{})
	defer letOnce.Do(func() { close(letR) }) // a failed test's held handlers and commits end too
	defer bOnce.Do(func() { close(bIn) })
	member := func(name string) *Worker {
		w, err := New(ctx, Config{
			Protocol: worker.Protocol{
				Store: store, Retention: 1000 * time.Hour, Owner: name, Logger: slog.New(slog.DiscardHandler),
				Decoder: worker.DecoderFunc(func(m *worker.Message) error { m.Key = m.Body; return nil }),
				Handler: worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
					if name == "A" && m.Body[0] == 'R' {
						started <- struct{}{}
						<-letR // ignores its context: it runs on after the revoke
					}
					return "done", nil
				}),
			},
			Brokers: c.ListenAddrs(), Topic: topic, Group: group,
			SessionTimeout: 6 * time.Second, RebalanceTimeout: 8 * time.Second, RevokeGrace: 500 * time.Millisecond,
			CommitInterval: 100 * time.Millisecond, ShutdownTimeout: 2 * time.Second,
			ClientOptions: []kgo.Opt{kgo.Dialer(net.DialContext)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	completed := func(key string) bool {
		cl, err := store.Get(ctx, key)
		return err == nil && cl.Status == claimstore.StatusCompleted
	}
	committed := func(part int32) int64 {
		if g := c.GroupInfo(group); g != nil {
			if pc, ok := g.Commits[topic][part]; ok {
				return pc.Offset
			}
		}
		return -1
	}
	until := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if ok() {
				return
			}
		}
		t.Fatalf("not %s within a minute", what)
	}
	run := func(w *Worker) (stop func()) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(rctx) }()
		return func() { cancel(); <-done }
	}

	a := member("A")
	a.commitAfterRevoke = plant
	stopA := run(a)
	defer stopA()
	<-started
	<-started
	until("S completed", func() bool { return completed("S0") && completed("S1") })
	memberA, _ := a.cl.GroupMetadata()

	b := member("B")
	stopB := run(b)
	defer stopB()
	moved := int32(-1)
	until("a partition B's", func() bool {
		g := c.GroupInfo(group)
		if g == nil || g.State != "Stable" {
			return false
		}
		memberB, _ := b.cl.GroupMetadata()
		for _, m := range g.Members {
			if m.MemberID == memberB && len(m.Assignment[topic]) == 1 {
				moved = m.Assignment[topic][0]
				return true
			}
		}
		return false
	})

	// A's commits of the moved partition from now on, all after its revoke
	// (before it, R held the partition's prefix at 0: nothing to commit),
	// wait in the broker for B's commit of the end.
	var mu sync.Mutex
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r, ok := req.(*kmsg.OffsetCommitRequest)
		if !ok || r.MemberID != memberA {
			return nil, nil, false
		}
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				if rp.Partition == moved {
					mu.Lock()
					late++
					mu.Unlock()
					c.SleepControl(func() { <-bIn })
					return nil, nil, false
				}
			}
		}
		return nil, nil, false
	})
	produce(moved, "T")
	until("T completed", func() bool { return completed(fmt.Sprint("T", moved)) })
	letOnce.Do(func() { close(letR) })
	until("B's commit of the end", func() bool { return committed(moved) == 3 })
	most = 3
	bOnce.Do(func() { close(bIn) })
	for range 20 { // two seconds of commit intervals
		time.Sleep(100 * time.Millisecond)
		most = max(most, committed(moved))
	}
	until("A's commit of its own partition", func() bool { return committed(1-moved) == 2 })
	stopB()
	stopA()
	mu.Lock()
	defer mu.Unlock()
	return committed(moved), most, late
}
