package integration

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/faultproxy"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// readyz returns a worker's /readyz status and body.
func readyz(addr string) (int, string) {
	resp, err := http.Get(addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestClockSkewPausesClaims: a worker process whose SQS answers come through
// a proxy that moves their Date a minute back, which is what a worker clock
// a minute ahead of AWS's sees. With payments waiting, it must claim
// nothing: /readyz answers 503 naming the clock skew, the skew is logged
// once and exported, no payment is charged, nothing is dead-lettered. When
// the answers agree with its clock again it resumes by itself and every
// payment is charged once.
func TestClockSkewPausesClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.keepLogs()
	px := startProxy(t, emulatorURL(t))
	rule := px.Add(&faultproxy.Rule{Name: "clock a minute ahead", Fault: faultproxy.ShiftDate(-time.Minute)})
	w := e.start("w1", workerOptions{extraEnv: []string{"METRICS_ADDR=127.0.0.1:0", "AWS_ENDPOINT_URL_SQS=" + px.URL}})
	waitFor(t, 30*time.Second, "the worker to serve metrics", func() bool { return w.logField("serving metrics", "addr") != "" })
	addr := w.logField("serving metrics", "addr")
	ps := payments("skew", 20)
	e.sendPayments(ps)

	// Give it the time it takes to drain these when the clock agrees.
	var code int
	var body string
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if c, b := readyz(addr); c == http.StatusServiceUnavailable {
			code, body = c, b
		}
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "clock skew") {
		t.Errorf("/readyz never answered 503 naming the clock skew while the clock was a minute ahead (last 503: %q)", body)
	}
	if st := e.fake.Stats(); st.Charges > 0 {
		t.Errorf("%d payments charged while the worker's clock was a minute ahead of AWS's, want 0", st.Charges)
	}
	if v := metric(t, addr, "claimfirst_clock_skewed", ""); v != 1 {
		t.Errorf("claimfirst_clock_skewed = %v while skewed, want 1", v)
	}
	if v := metric(t, addr, "claimfirst_clock_offset_seconds", ""); v > -58 || v < -62 {
		t.Errorf("claimfirst_clock_offset_seconds = %v, want about -60 (this clock ahead)", v)
	}
	if n := w.logCount("clock skew: this clock is off"); n != 1 {
		t.Errorf("the skew was logged %d times, want once", n)
	}

	rule.Off()
	waitFor(t, 30*time.Second, "/readyz to answer 200 after the clock agreed", func() bool { c, _ := readyz(addr); return c == http.StatusOK })
	e.waitDrained(2 * time.Minute)
	e.assertChargedOnce(ps)
	e.assertNoDeadLetters()
	if v := metric(t, addr, "claimfirst_clock_skewed", ""); v != 0 {
		t.Errorf("claimfirst_clock_skewed = %v after the clock agreed, want 0", v)
	}
	if n := w.logCount("agrees with AWS's again"); n != 1 {
		t.Errorf("the recovery was logged %d times, want once", n)
	}
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
}

// TestLambdaClockSkew: a Lambda whose SQS answers are a minute behind its
// clock reports every record of a batch back unclaimed, with a short
// visibility; with the clock agreeing again, the same records are handled.
func TestLambdaClockSkew(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	px := startProxy(t, emulatorURL(t))
	rule := px.Add(&faultproxy.Rule{Name: "clock a minute ahead", Fault: faultproxy.ShiftDate(-time.Minute)})
	cfg := awstest.Config(t)
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(px.URL) })
	var handled atomic.Int32
	l, err := sqsworker.NewLambda(context.Background(), sqsworker.LambdaConfig{
		SQS: client, QueueURL: e.queueURL, EMF: io.Discard,
		Protocol: worker.Protocol{
			Store:   memory.New(memory.Config{}),
			Handler: worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) { handled.Add(1); return "ok", nil }),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := e.lambdaEvent([]string{`{"n":1}`, `{"n":2}`, `{"n":3}`})
	resp, err := l.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := lambdaFailures(t, resp); len(got) != len(ev.Records) || handled.Load() != 0 {
		t.Fatalf("skewed: %d of %d records reported back, %d handled; want all back, none handled", len(got), len(ev.Records), handled.Load())
	}
	// Reported back with a short visibility: they come back within about 10 s.
	order := map[string]int{}
	for i, r := range ev.Records {
		order[r.MessageId] = i
	}
	start := time.Now()
	again := e.lambdaReceive(order)
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("records came back after %s, want a short visibility", d)
	}
	rule.Off()
	resp, err = l.Handle(context.Background(), again)
	if err != nil {
		t.Fatal(err)
	}
	if got := lambdaFailures(t, resp); len(got) != 0 || handled.Load() != int32(len(ev.Records)) {
		t.Errorf("clock agreeing: %d records reported back, %d handled; want none back, all handled", len(got), handled.Load())
	}
}
