package provider_test

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/claimfirst/claimfirst/internal/syncbuf"
	"github.com/claimfirst/claimfirst/provider"
)

// TestLookupListsCharges: the lookup asks for the payment's charges and
// reads them; a 5xx is retried like a charge.
func TestLookupListsCharges(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if r.Method != http.MethodGet || r.URL.Path != "/v1/charges" || r.URL.Query().Get("payment_id") != "pay 1" {
			t.Errorf("lookup request %s %s", r.Method, r.URL)
		}
		_, _ = w.Write([]byte(`{"data":[{"id":"ch_1","payment_id":"pay 1","amount":1999,"currency":"EUR","status":"succeeded"}]}`))
	}))
	c := newClient(t, fastConfig(srv.URL))
	got, err := c.Lookup(t.Context(), "pay 1")
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	if len(got) != 1 || got[0].ID != "ch_1" || got[0].Amount != 1999 {
		t.Errorf("Lookup = %+v", got)
	}
	if calls.Load() != 2 {
		t.Errorf("calls = %d, want 2 (one retry)", calls.Load())
	}
}

// TestLookupNotSupported: a provider answering 404 to the lookup cannot
// look up, and says so with ErrNoLookup, without retrying.
func TestLookupNotSupported(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		http.NotFound(w, nil)
	}))
	c := newClient(t, fastConfig(srv.URL))
	_, err := c.Lookup(t.Context(), "pay_1")
	if !errors.Is(err, provider.ErrNoLookup) {
		t.Fatalf("Lookup err = %v, want ErrNoLookup", err)
	}
	if pe := asError(t, err); pe.Retryable() || calls.Load() != 1 {
		t.Errorf("error %+v after %d calls: want one call, not retryable", pe, calls.Load())
	}
}

// TestRetriesAreLoggedAndCounted: each retry is a debug line, giving up is
// a warn line, and the client's counters say so.
func TestRetriesAreLoggedAndCounted(t *testing.T) {
	t.Parallel()
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	var buf syncbuf.Buffer
	cfg := fastConfig(srv.URL)
	cfg.MaxAttempts = 3
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newClient(t, cfg)
	if _, err := c.Charge(t.Context(), "pay_1", pay("pay_1")); err == nil {
		t.Fatal("Charge succeeded against a 502")
	}
	out := buf.String()
	if n := strings.Count(out, "level=DEBUG msg=\"provider: retrying\""); n != 2 {
		t.Errorf("%d retry lines, want 2:\n%s", n, out)
	}
	if n := strings.Count(out, "level=WARN msg=\"provider: attempts exhausted\""); n != 1 {
		t.Errorf("%d exhausted lines, want 1:\n%s", n, out)
	}
	if st := c.Stats(); st != (provider.ClientStats{Attempts: 3, Retries: 2, Exhausted: 1}) {
		t.Errorf("Stats = %+v", st)
	}
}

// TestConnectionRefusedIsKnownNotSent: nothing listening means nothing was
// charged by that attempt, and the error says so.
func TestConnectionRefusedIsKnownNotSent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cfg := fastConfig("http://" + addr)
	cfg.MaxAttempts = 2
	c := newClient(t, cfg)
	_, err = c.Charge(t.Context(), "pay_1", pay("pay_1"))
	pe := asError(t, err)
	if !pe.NotSent || !pe.Retryable() || !strings.Contains(pe.Error(), "not sent") {
		t.Errorf("error %q (%+v): want retryable, known not sent", pe, pe)
	}
}
