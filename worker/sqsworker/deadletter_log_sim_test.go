package sqsworker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/syncbuf"
	"github.com/claimfirst/claimfirst/sim"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// TestDeadLetteredLineNamesTheKey: the "dead-lettered" line of a message
// the handler failed permanently carries its idempotency_key, so a dead
// letter is found in the logs by its key as well as by its id.
func TestDeadLetteredLineNamesTheKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := sim.NewSQS(sim.SQSConfig{})
		if _, err := q.CreateQueue(sim.QueueConfig{Name: "dlq"}); err != nil {
			t.Fatal(err)
		}
		url, err := q.CreateQueue(sim.QueueConfig{Name: "work", VisibilityTimeout: 30 * time.Second, DeadLetter: "dlq", MaxReceiveCount: 10})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("pay_7")}); err != nil {
			t.Fatal(err)
		}
		logs := &syncbuf.Buffer{}
		cfg := sqsworker.Config{}
		cfg.QueueURL, cfg.SQS, cfg.Store = url, q, memory.New(memory.Config{})
		cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		cfg.Metrics = worker.NewMetrics(prometheus.NewRegistry())
		cfg.Decoder = worker.DecoderFunc(func(m *worker.Message) error { m.Key = m.Body; return nil })
		cfg.Handler = worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) {
			return "", worker.Permanentf("no such account")
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
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"msg":"dead-lettered"`) {
				if !strings.Contains(l, `"idempotency_key":"pay_7"`) {
					t.Errorf("dead-lettered line %s: want idempotency_key pay_7", l)
				}
				return
			}
		}
		t.Errorf("no dead-lettered line in:\n%s", logs.String())
	})
}
