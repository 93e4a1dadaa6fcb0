package worker_test

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

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
)

// TestHTTPHandlerAnyTransport: the endpoints every transport serves.
// /readyz answers with the transport's readiness, which adds its own
// causes to Engine.Ready: the breaker's dependency is named, its error
// (which may name accounts and roles) is not; /metrics serves the
// metrics alone when no gatherer is given.
func TestHTTPHandlerAnyTransport(t *testing.T) {
	t.Parallel()
	m := worker.NewMetrics(nil)
	e, err := worker.NewEngine(worker.Protocol{
		Store: memory.New(memory.Config{}), Retention: time.Hour, Metrics: m, Logger: slog.New(slog.DiscardHandler),
		Handler: worker.HandlerFunc(func(context.Context, *worker.Message) (string, error) { return "", nil }),
	}, worker.EngineOptions{BreakerThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	starting := true
	h := worker.HTTPHandler(func() error {
		if starting {
			return errors.New("starting")
		}
		return e.Ready()
	}, nil, m)
	get := func(path string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, strings.TrimSpace(string(b))
	}
	for _, s := range []struct {
		name string
		do   func()
		code int
		body string
	}{
		{"starting", func() {}, http.StatusServiceUnavailable, "not ready: starting"},
		{"ready", func() { starting = false }, http.StatusOK, "ready"},
		{"broker down", func() { e.DependencyFailed("kafka", errors.New("SASL: user alice denied")) },
			http.StatusServiceUnavailable, "not ready: breaker open: kafka keeps failing"},
		{"broker back", func() { e.DependencyRecovered("kafka") }, http.StatusOK, "ready"},
	} {
		s.do()
		if code, body := get("/readyz"); code != s.code || body != s.body {
			t.Errorf("%s: /readyz = %d %q, want %d %q", s.name, code, body, s.code, s.body)
		}
		if code, _ := get("/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz = %d, want 200", s.name, code)
		}
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "claimfirst_breaker_opens_total 1") {
		t.Errorf("/metrics = %d, want the engine's metrics:\n%s", code, body)
	}
}
