package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/once"
)

// TestMetricsLabels: the retry and breaker series of the known
// dependencies exist at zero before any failure (dashboards and alarms see
// them), and a handler's own error is retries_total{dependency="handler"}.
func TestMetricsLabels(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	for _, want := range []string{
		`claimfirst_retries_total{dependency="sqs"} 0`, `claimfirst_retries_total{dependency="claimstore"} 0`,
		`claimfirst_retries_total{dependency="handler"} 0`,
		`claimfirst_breaker_open{dependency="sqs"} 0`, `claimfirst_breaker_open{dependency="claimstore"} 0`,
	} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if len(m.GetLabel()) != 1 {
					continue
				}
				line := mf.GetName() + `{dependency="` + m.GetLabel()[0].GetValue() + `"} 0`
				if line == want && (m.GetCounter().GetValue() == 0 && m.GetGauge().GetValue() == 0) {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("no %s before the first failure", want)
		}
	}

	var calls atomic.Int32
	f := newFixture(HandlerFunc(func(context.Context, *Message) (string, error) {
		if calls.Add(1) == 1 {
			return "", errors.New("the handler's own error")
		}
		return "ok", nil
	}))
	f.p.now, f.p.minBackoff, f.p.maxHold = time.Now, 10*time.Millisecond, 20*time.Millisecond
	f.p.store = memory.New(memory.Config{})
	f.p.process(context.Background(), &Message{ID: "m1", Attempt: 1}, holdingLease(make(chan struct{})))
	if got := counterValue(f.metrics.retries.WithLabelValues("handler")); got != 1 {
		t.Errorf(`retries{dependency="handler"} = %v, want 1 (retries{""} = %v)`, got, counterValue(f.metrics.retries.WithLabelValues("")))
	}
}

func TestResultAttrsTruncates(t *testing.T) {
	t.Parallel()
	if got := resultAttrs("ch_1"); len(got) != 1 || got[0].(slog.Attr).Value.String() != "ch_1" {
		t.Errorf("short result: %v", got)
	}
	big := strings.Repeat("é", 300_000) // 600,000 bytes
	got := resultAttrs(big)
	if len(got) != 2 {
		t.Fatalf("long result: %d attrs, want result and result_bytes", len(got))
	}
	r, n := got[0].(slog.Attr), got[1].(slog.Attr)
	if len(r.Value.String()) > maxLoggedResult+3 || !utf8.ValidString(r.Value.String()) {
		t.Errorf("logged %d bytes (valid UTF-8 %v), want at most %d", len(r.Value.String()), utf8.ValidString(r.Value.String()), maxLoggedResult+3)
	}
	if n.Key != "result_bytes" || n.Value.Int64() != 600_000 {
		t.Errorf("size attr %v, want result_bytes=600000", n)
	}
}

// TestReasonSaysItOnce: a dead-letter reason whose cause repeats it says it
// once, after its code: the error's own, else the step's.
func TestReasonSaysItOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want string
	}{
		{Permanent("idempotency key reused with a different payment",
			errors.New("provider: idempotency key reused with a different payment: HTTP 422")),
			"permanent: idempotency key reused with a different payment: HTTP 422"},
		{&PermanentError{Code: CodeKeyReused, Reason: "idempotency key reused with a different payment"},
			"key_reused: idempotency key reused with a different payment"},
		{Permanent("invalid payment message", errors.New("payment: unknown field \"x\"")),
			"permanent: invalid payment message: payment: unknown field \"x\""},
		{Permanentf("no key"), "permanent: no key"},
		{once.Permanent("", errors.New("no key")), "permanent: no key"},
		{once.Permanent("invalid card", errors.New("provider: invalid card: HTTP 422")), "permanent: invalid card: HTTP 422"},
		{Permanentf("permanent: said once"), "permanent: said once"},
	}
	for _, tc := range cases {
		if got := reason(tc.err, CodePermanent); got != tc.want {
			t.Errorf("reason = %q, want %q", got, tc.want)
		}
	}
}
