package sqsworker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/logcheck"
	"github.com/claimfirst/claimfirst/internal/syncbuf"
	"github.com/claimfirst/claimfirst/sim"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// TestOutcomesCountedAndLoggedTogether runs the long-poll transport on the
// simulator's in-memory SQS, on a virtual clock: payments that succeed,
// fail once, are poison, or are sent twice. Every outcome the metrics count
// is a log line with that outcome attribute, one for one, the queue
// drains, and no line carries a duration as bare nanoseconds.
func TestOutcomesCountedAndLoggedTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := sim.NewSQS(sim.SQSConfig{})
		if _, err := q.CreateQueue(sim.QueueConfig{Name: "dlq"}); err != nil {
			t.Fatal(err)
		}
		url, err := q.CreateQueue(sim.QueueConfig{Name: "work", VisibilityTimeout: 30 * time.Second, DeadLetter: "dlq", MaxReceiveCount: 10})
		if err != nil {
			t.Fatal(err)
		}
		bodies := []string{"ok-1", "ok-2", "fail-3", "poison-4", "ok-1", "fail-5", "ok-6"}
		for _, b := range bodies {
			if _, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b)}); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		failed := map[string]bool{}
		logs := &syncbuf.Buffer{}
		metrics := worker.NewMetrics(prometheus.NewRegistry())
		cfg := sqsworker.Config{}
		cfg.QueueURL, cfg.SQS, cfg.Store = url, q, memory.New(memory.Config{})
		check := logcheck.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		cfg.Logger = slog.New(check)
		cfg.Metrics, cfg.HoldFor = metrics, time.Nanosecond
		cfg.Decoder = worker.DecoderFunc(func(m *worker.Message) error {
			if strings.HasPrefix(m.Body, "poison") {
				return errors.New("not a payment")
			}
			m.Key = m.Body
			return nil
		})
		cfg.Handler = worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
			time.Sleep(10 * time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			if strings.HasPrefix(m.Key, "fail") && !failed[m.Key] {
				failed[m.Key] = true
				return "", errors.New("provider answered 503")
			}
			return "charged " + m.Key, nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		w, err := sqsworker.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		for q.Stats(url).Visible+q.Stats(url).InFlight > 0 {
			time.Sleep(time.Second)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}

		logged := map[string]int{}
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var l struct {
				Outcome  string `json:"outcome"`
				Messages int    `json:"messages"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("log line %q: %v", sc.Text(), err)
			}
			if l.Outcome != "" {
				logged[l.Outcome] += max(l.Messages, 1)
			}
		}
		// The second copy of ok-1 may arrive while the first holds the key
		// (deferred) or after (duplicate at once): deferred is 0 or 1.
		want := map[worker.Outcome]int64{
			worker.OutcomeAcquired: 7, worker.OutcomeCompleted: 5, worker.OutcomeReleased: 2,
			worker.OutcomeDuplicate: 1, worker.OutcomeDeadLettered: 1,
		}
		for _, o := range []worker.Outcome{worker.OutcomeAcquired, worker.OutcomeCompleted, worker.OutcomeReleased,
			worker.OutcomeDuplicate, worker.OutcomeDeadLettered, worker.OutcomeDeferred, worker.OutcomeStoreError} {
			n := metrics.Count(o)
			if int64(logged[string(o)]) != n || (o != worker.OutcomeDeferred && n != want[o]) {
				t.Errorf("%s: counted %d, logged %d, want %d", o, n, logged[string(o)], want[o])
			}
		}
		if found := check.Durations(); len(found) > 0 {
			t.Errorf("durations logged as time.Duration (bare nanoseconds in JSON):\n%s", strings.Join(found, "\n"))
		}
		if t.Failed() {
			fmt.Println(logs.String())
		}
	})
}
