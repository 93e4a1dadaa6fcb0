package kafkaworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
)

// brokers returns the Kafka cluster's seed brokers from KAFKA_BROKERS
// (emulator/with-kafka.sh runs kfake and exports it); it skips without
// one, and fails without one under `make test`.
func brokers(t *testing.T) []string {
	t.Helper()
	b := os.Getenv("KAFKA_BROKERS")
	if b == "" {
		if os.Getenv("CLAIMFIRST_KAFKA") != "" || os.Getenv("CLAIMFIRST_EMULATOR") != "" {
			t.Fatal("KAFKA_BROKERS is not set under `make test`: the Kafka launcher did not export it")
		}
		t.Skip("needs a Kafka cluster: run under emulator/with-kafka.sh (make test does)")
	}
	return strings.Split(b, ",")
}

// TestCommitsOnlyTheSettledPrefix: record A runs (its handler held) while
// B, after it in the partition, completes; the worker stops with A
// unsettled. The group's committed offset stays at A, so the next member
// runs A and completes it. With the planted fault (B's settling commits
// past A, as a consumer that commits what it fetched does) the committed
// offset passes A, and A is never run again: lost.
func TestCommitsOnlyTheSettledPrefix(t *testing.T) {
	bs := brokers(t)
	t.Parallel()
	for _, plant := range []bool{false, true} {
		t.Run(fmt.Sprintf("planted=%t", plant), func(t *testing.T) {
			t.Parallel()
			committed, aDone := commitScenario(t, bs, plant)
			switch {
			case !plant && (committed > 0 || !aDone):
				t.Errorf("committed offset %d with A unsettled (want 0), A completed by the next member: %t", committed, aDone)
			case plant && committed == 0:
				t.Errorf("the planted fault (commit past an unsettled record) was not caught: committed %d", committed)
			default:
				t.Logf("committed offset %d after the stop; A completed by the next member: %t", committed, aDone)
			}
		})
	}
}

// commitScenario runs the scenario and returns the group's committed offset
// after the first member stopped, and whether A was completed (by the
// second member, run only without the plant: with it A is not fetched).
func commitScenario(t *testing.T, bs []string, plant bool) (committed int64, aDone bool) {
	ctx := t.Context()
	topic := fmt.Sprintf("prefix-%d-%t", time.Now().UnixNano(), plant)
	group := topic + "-g"
	cl, err := kgo.NewClient(kgo.SeedBrokers(bs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, tp := range []string{topic, topic + DeadLetterSuffix} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, tp); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"A", "B"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(b), Value: []byte(b)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	store := memory.New(memory.Config{})
	started := make(chan struct{}, 1)
	member := func(holdA bool) (*Worker, error) {
		return New(ctx, Config{
			Protocol: worker.Protocol{
				Store: store, Retention: 1000 * time.Hour, Logger: slog.New(slog.DiscardHandler),
				Decoder: worker.DecoderFunc(func(m *worker.Message) error { m.Key = m.Body; return nil }),
				Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) (string, error) {
					if holdA && m.Body == "A" {
						started <- struct{}{}
						<-ctx.Done()
						return "", ctx.Err()
					}
					return "done", nil
				}),
			},
			Brokers: bs, Topic: topic, Group: group,
			SessionTimeout: 6 * time.Second, RebalanceTimeout: 8 * time.Second,
			CommitInterval: 50 * time.Millisecond, ShutdownTimeout: 400 * time.Millisecond,
		})
	}
	completed := func(key string) bool {
		c, err := store.Get(ctx, key)
		return err == nil && c.Status == claimstore.StatusCompleted
	}
	until := func(what string, d time.Duration, ok func() bool) bool {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if ok() {
				return true
			}
		}
		t.Logf("not %s within %s", what, d)
		return false
	}

	w1, err := member(true)
	if err != nil {
		t.Fatal(err)
	}
	w1.commitPastUnsettled = plant
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w1.Run(rctx) }()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		stop()
		t.Fatal("A never started")
	}
	if !until("B completed", 10*time.Second, func() bool { return completed("B") }) {
		stop()
		t.Fatal("B never completed")
	}
	time.Sleep(300 * time.Millisecond) // commit intervals pass
	stop()
	if err := <-done; err != nil && !errors.Is(err, ErrShutdownTimeout) {
		t.Errorf("Run: %v", err) // ErrShutdownTimeout or nil: A's run was abandoned and released
	}

	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(topic, 0); ok {
		committed = o.At
	}
	if plant {
		return committed, completed("A")
	}
	w2, err := member(false)
	if err != nil {
		t.Fatal(err)
	}
	rctx2, stop2 := context.WithCancel(ctx)
	done2 := make(chan error, 1)
	go func() { done2 <- w2.Run(rctx2) }()
	aDone = until("A completed by the next member", 20*time.Second, func() bool { return completed("A") })
	stop2()
	if err := <-done2; err != nil {
		t.Errorf("Run of the next member: %v", err)
	}
	return committed, aDone
}
