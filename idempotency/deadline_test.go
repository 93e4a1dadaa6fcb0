package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/idempotency"
)

// TestNothingWrittenAfterTheDeadlineReleasesTheKey: a handler that returns
// without writing once its context is done has not answered: its key is
// released and the retry runs it, never an empty 200 replayed. A handler
// that did write (even a bare WriteHeader(200)) answered, and that answer
// is the key's.
func TestNothingWrittenAfterTheDeadlineReleasesTheKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// first is the first run, after the request's deadline has passed.
		first     func(w http.ResponseWriter)
		wantFirst int
		wantRuns  int32 // after the retry
	}{
		{"nothing written", func(http.ResponseWriter) {}, http.StatusServiceUnavailable, 2},
		{"WriteHeader(200), no body", func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }, http.StatusOK, 1},
		{"201 written late", func(w http.ResponseWriter) { w.WriteHeader(http.StatusCreated) }, http.StatusCreated, 1},
		{"Flush only", func(w http.ResponseWriter) { w.(http.Flusher).Flush() }, http.StatusOK, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			mw := middleware(t, memory.New(memory.Config{}), idempotency.Options{})
			inner := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					<-r.Context().Done() // the deadline fires while it works
					tc.first(w)
					return
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = fmt.Fprint(w, "order 2")
			}))
			// A timeout middleware in front, as an API has.
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, cancel := context.WithTimeout(r.Context(), 100*time.Millisecond)
				defer cancel()
				inner.ServeHTTP(w, r.WithContext(ctx))
			}))
			t.Cleanup(srv.Close)

			first := send(t, srv, "/orders", "Bearer alice", "k", `{}`)
			if first.status != tc.wantFirst {
				t.Errorf("first = %+v, want %d", first, tc.wantFirst)
			}
			retry := send(t, srv, "/orders", "Bearer alice", "k", `{}`)
			if n := runs.Load(); n != tc.wantRuns {
				t.Errorf("handler ran %d times, want %d; retry = %+v", n, tc.wantRuns, retry)
			}
			switch {
			case tc.wantRuns == 2 && (retry.replayed || retry.body != "order 2"):
				t.Errorf("retry = %+v, want the handler's own answer", retry)
			case tc.wantRuns == 1 && (!retry.replayed || retry.status != first.status):
				t.Errorf("retry = %+v, want the first answer (%d) replayed", retry, first.status)
			}
		})
	}
}

// TestPanicWithNothingWrittenReleasesTheKey: a handler that panics has not
// answered; the retry runs it again.
func TestPanicWithNothingWrittenReleasesTheKey(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	mw := middleware(t, memory.New(memory.Config{}), idempotency.Options{})
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			panic(http.ErrAbortHandler) // net/http drops the connection, quietly
		}
		w.WriteHeader(http.StatusCreated)
	})))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/orders", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Idempotency-Key", "k")
	if resp, err := srv.Client().Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("first: %d, want the connection dropped", resp.StatusCode)
	}
	if r := send(t, srv, "/orders", "Bearer alice", "k", `{}`); r.status != http.StatusCreated || r.replayed {
		t.Errorf("retry after a panic = %+v, want the handler to run again", r)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}
