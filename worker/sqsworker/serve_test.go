package sqsworker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
)

// TestHTTPHandler: /readyz follows the worker's life (starting, polling,
// breaker open, stopping), /healthz is always up, and /metrics serves the
// worker's counters from the given registry or, with none, on their own.
func TestHTTPHandler(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := worker.NewMetrics(reg)
	p := worker.Protocol{
		Metrics: m, Store: memory.New(memory.Config{}), Retention: time.Hour, Logger: slog.New(slog.DiscardHandler),
		Handler: worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) { return "", nil }),
	}
	proc, err := worker.NewEngine(p, worker.EngineOptions{BreakerThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{cfg: Config{Protocol: p}, ready: make(chan struct{}), stop: make(chan struct{}), proc: proc}
	get := func(h http.Handler, path string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(b)
	}
	h := w.HTTPHandler(reg)
	steps := []struct {
		name      string
		do        func()
		ready     int
		readyBody string
	}{
		{"starting", func() {}, http.StatusServiceUnavailable, "not ready: starting"},
		{"polling", func() { close(w.ready) }, http.StatusOK, "ready"},
		// The dependency's error stays in the log: an unauthenticated
		// endpoint must not tell a stranger which account and role failed.
		{"breaker open", func() {
			w.proc.DependencyFailed("claim store", errors.New("AccessDeniedException: User: arn:aws:sts::123456789012:assumed-role/worker/i-0abc is not authorized to perform: dynamodb:UpdateItem"))
		}, http.StatusServiceUnavailable, "not ready: breaker open: claim store keeps failing"},
		{"breaker closed", func() { w.proc.DependencyRecovered("claim store") }, http.StatusOK, "ready"},
		{"stopping", func() { close(w.stop) }, http.StatusServiceUnavailable, "not ready: stopping"},
	}
	for _, s := range steps {
		s.do()
		if code, body := get(h, "/readyz"); code != s.ready || strings.TrimSpace(body) != s.readyBody {
			t.Errorf("%s: /readyz = %d %q, want %d %q", s.name, code, strings.TrimSpace(body), s.ready, s.readyBody)
		}
		if code, _ := get(h, "/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz = %d, want 200", s.name, code)
		}
	}

	m.Record(slog.New(slog.DiscardHandler), slog.LevelInfo, worker.OutcomeCompleted, "completed")
	for name, h := range map[string]http.Handler{"registry": h, "nil gatherer": w.HTTPHandler(nil)} {
		code, body := get(h, "/metrics")
		if code != http.StatusOK {
			t.Errorf("%s: /metrics = %d", name, code)
		}
		for _, want := range []string{`claimfirst_messages_total{outcome="completed"} 1`, `claimfirst_breaker_opens_total 1`} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: /metrics lacks %q:\n%s", name, want, body)
			}
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/readyz", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /readyz = %d, want 405", rec.Code)
	}
}
