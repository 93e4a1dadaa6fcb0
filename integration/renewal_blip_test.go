package integration

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/faultproxy"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// TestRenewalBlipStillCompletes: the claim store's renewals (the
// UpdateItem that sets only the lease) fail with 500s for longer than a
// lease while the message's visibility is still extended. The lease runs
// out on the worker's clock and the handler's context ends, but the
// handler's effect has happened and it returns success; nobody took the
// key over. The worker completes the claim (the write is conditioned on its
// acquisition) and acks: one effect, the claim completed, the queue empty.
func TestRenewalBlipStillCompletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{visibility: 3 * time.Second, maxReceive: 5})
	px := startProxy(t, emulatorURL(t))
	blip := px.Add(&faultproxy.Rule{Name: "renewals fail", Match: renewWrite,
		Fault: faultproxy.AWSError(http.StatusInternalServerError, "InternalServerError", "internal server error")})
	blip.Off()
	cfg := awstest.Config(t)
	cfg.BaseEndpoint = aws.String(px.URL)
	store, err := dynamo.New(dynamo.Config{Client: dynamodb.NewFromConfig(cfg), Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	var effects, cancelled atomic.Int32
	metrics := worker.NewMetrics(nil)
	stop := runWorker(t, e, sqsworker.Config{
		HoldFor: time.Second,
		Protocol: worker.Protocol{
			Store: store, Metrics: metrics, MinRetryBackoff: 200 * time.Millisecond,
			Decoder: worker.DecoderFunc(func(m *worker.Message) error { m.Key = m.Body; return nil }),
			Handler: worker.HandlerFunc(func(ctx context.Context, _ *worker.Message) (string, error) {
				effects.Add(1) // the mail is sent
				blip.On()
				// The renewals fail from now on: the lease runs out on
				// this clock, about one lease (2.7 s) from the receipt.
				select {
				case <-ctx.Done():
					cancelled.Add(1)
				case <-time.After(10 * time.Second):
				}
				blip.Off()
				return "sent", nil
			}),
		},
	})
	key := awstest.Name("mail")
	e.send(key)
	waitFor(t, 40*time.Second, "the message to be completed, or run twice", func() bool {
		return metrics.Count(worker.OutcomeCompleted) > 0 || effects.Load() > 1
	})
	e.waitDrained(30 * time.Second)
	stop()
	t.Logf("effects %d, handler cancelled %d, renewals failed %s", effects.Load(), cancelled.Load(), blip)
	if cancelled.Load() == 0 || blip.Injected() == 0 {
		t.Fatalf("the handler was not cancelled (%d) or no renewal failed (%s): the blip did not happen", cancelled.Load(), blip)
	}
	if n := effects.Load(); n != 1 {
		t.Errorf("the effect ran %d times, want 1", n)
	}
	if c, ll := metrics.Count(worker.OutcomeCompleted), metrics.Count(worker.OutcomeLeaseLost); c != 1 || ll != 0 {
		t.Errorf("completed %d, lease_lost %d; want 1 and 0", c, ll)
	}
	if row := e.claim(key); row["status"] != "COMPLETED" || row["result"] != "sent" {
		t.Errorf("claim %v, want COMPLETED with the handler's result", row)
	}
	e.assertNoDeadLetters()
}
