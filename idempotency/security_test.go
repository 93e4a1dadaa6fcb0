package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/idempotency"
)

// send posts body to path with the key header sent raw and, if auth is
// set, an Authorization header.
func send(t *testing.T, srv *httptest.Server, path, auth, key, body string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if key != "" {
		req.Header["Idempotency-Key"] = []string{key}
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", header: resp.Header, body: string(b)}
}

func TestAnotherClientNeverGetsYourResponse(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store) {
		a := serve(t, s, idempotency.Options{}, &api{})
		alice := send(t, a.srv, "/orders", "Bearer alice", "k", `{"sku":"A"}`)
		bob := send(t, a.srv, "/orders", "Bearer bob", "k", `{"sku":"A"}`)
		if bob.replayed || bob.body == alice.body {
			t.Fatalf("bob, with alice's key and body, got %+v: alice's response replayed", bob)
		}
		if bob.status != http.StatusCreated && bob.status != http.StatusUnprocessableEntity {
			t.Errorf("bob = %+v, want his own run (201) or 422", bob)
		}
		if again := send(t, a.srv, "/orders", "Bearer alice", "k", `{"sku":"A"}`); !again.replayed || again.body != alice.body {
			t.Errorf("alice's repeat = %+v, want her own response replayed", again)
		}
	})
}

func TestNewRefusesKeysNotBoundToAClient(t *testing.T) {
	t.Parallel()
	_, err := idempotency.New(idempotency.Options{Store: memory.New(memory.Config{}), Scope: idempotency.Prefix("orders#")})
	if err == nil || !strings.Contains(err.Error(), "Client") {
		t.Fatalf("New without a per-client scope: err = %v, want one naming Client", err)
	}
}

func TestResponsesThatSayNothingReleaseTheKey(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooManyRequests} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, s claimstore.Store) {
				a := serve(t, s, idempotency.Options{}, &api{status: func(run int32) int {
					if run == 1 {
						return status
					}
					return http.StatusCreated
				}})
				if r := send(t, a.srv, "/orders", "Bearer alice", "k", `{}`); r.status != status {
					t.Fatalf("first = %+v, want the handler's %d", r, status)
				}
				if r := send(t, a.srv, "/orders", "Bearer alice", "k", `{}`); r.status != http.StatusCreated || r.replayed {
					t.Errorf("retry after %d = %+v, want the handler to run again", status, r)
				}
			})
		})
	}
}

func TestFingerprintCoversTheQuery(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store) {
		a := serve(t, s, idempotency.Options{}, &api{})
		send(t, a.srv, "/orders?account=alice", "Bearer alice", "k", `{}`)
		if r := send(t, a.srv, "/orders?account=bob", "Bearer alice", "k", `{}`); r.status != http.StatusUnprocessableEntity {
			t.Errorf("the key with another query = %+v, want 422", r)
		}
	})
}

func TestFingerprintFieldsAreDelimited(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ pathA, bodyA, pathB, bodyB string }{
		{"/orders/1\n", "x", "/orders/1", "\nx"},
		{"/orders", "", "/orders?", ""},
	} {
		a := httptest.NewRequest(http.MethodPost, "http://api"+strings.ReplaceAll(tc.pathA, "\n", "%0A"), nil)
		b := httptest.NewRequest(http.MethodPost, "http://api"+strings.ReplaceAll(tc.pathB, "\n", "%0A"), nil)
		if idempotency.RequestFingerprint(a, []byte(tc.bodyA)) == idempotency.RequestFingerprint(b, []byte(tc.bodyB)) {
			t.Errorf("%q with body %q and %q with body %q have one fingerprint", tc.pathA, tc.bodyA, tc.pathB, tc.bodyB)
		}
	}
}

func TestKeyIsAStructuredFieldString(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store) {
		a := serve(t, s, idempotency.Options{}, &api{})
		first := send(t, a.srv, "/orders", "Bearer alice", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{}`)
		if first.status != http.StatusCreated {
			t.Fatalf("first = %+v", first)
		}
		if r := send(t, a.srv, "/orders", "Bearer alice", `8e03978e-40d5-43e8-bc93-6894a57f9324`, `{}`); !r.replayed || r.body != first.body {
			t.Errorf("the same key as a bare token = %+v, want the quoted key's response replayed", r)
		}
		for _, bad := range []string{`"unterminated`, `"a"b`, `"bad \q escape"`, `""`} {
			if r := send(t, a.srv, "/orders", "Bearer alice", bad, `{}`); r.status != http.StatusBadRequest {
				t.Errorf("key %s = %+v, want 400", bad, r)
			}
		}
		if n := a.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}

func TestClientDisconnectDoesNotEndTheClaim(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store) {
		var runs atomic.Int32
		started := make(chan struct{})
		gone := make(chan context.Context, 1)
		opts := idempotency.Options{Lease: 3 * time.Second}
		inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			if n == 1 {
				close(started)
				select { // the request's own context ends when the client goes
				case <-(<-gone).Done():
				case <-time.After(10 * time.Second):
				}
				time.Sleep(4 * time.Second) // past a lease: only a renewal keeps it
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, "order %d", n)
		})
		// The client's request context, seen from outside the middleware.
		mw := middleware(t, s, opts)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case gone <- r.Context():
			default:
			}
			mw(inner).ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)

		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", "k")
		done := make(chan error, 1)
		go func() {
			resp, err := srv.Client().Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			done <- err
		}()
		<-started
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("client: %v, want it cancelled", err)
		}
		// The retry waits while the first still runs, then gets its answer.
		var r reply
		for range 100 {
			if r = send(t, srv, "/orders", "Bearer alice", "k", `{}`); r.status != http.StatusConflict {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !r.replayed || r.body != "order 1" {
			t.Errorf("retry after the client went = %+v, want the first run's response replayed", r)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}

func TestStoredHeadersCountTowardTheStoredSize(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store) {
		var runs atomic.Int32
		opts := idempotency.Options{MaxResponseBytes: 1000}
		mw := middleware(t, s, opts)
		srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Set("Location", "/orders/"+strings.Repeat("x", 2000))
			w.WriteHeader(http.StatusCreated)
		})))
		t.Cleanup(srv.Close)
		if r := send(t, srv, "/orders", "Bearer alice", "k", `{}`); r.status != http.StatusCreated {
			t.Fatalf("first = %+v", r)
		}
		r := send(t, srv, "/orders", "Bearer alice", "k", `{}`)
		if r.status != http.StatusInternalServerError || r.replayed || !strings.Contains(r.body, "cannot be replayed") {
			t.Errorf("repeat of a response with a 2 KB header over a 1000-byte limit = %d replayed=%v %q, want 500: too large to store", r.status, r.replayed, r.body)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}

type principalKey struct{}

func TestPrincipalBindsKeysToTheAuthenticatedClient(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	mw := middleware(t, memory.New(memory.Config{}), idempotency.Options{Client: idempotency.Principal(principalKey{})})
	inner := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "order %d", runs.Add(1))
	}))
	// The outer middleware authenticates; a request it lets through without
	// a principal is a wiring mistake, answered 401, never a shared key.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, user))
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	alice := send(t, srv, "/orders", "Bearer alice", "k", `{}`)
	if r := send(t, srv, "/orders", "Bearer bob", "k", `{}`); r.replayed || r.body != "order 2" {
		t.Errorf("bob with alice's key = %+v, want his own run", r)
	}
	if r := send(t, srv, "/orders", "Bearer alice", "k", `{}`); !r.replayed || r.body != alice.body {
		t.Errorf("alice's repeat = %+v, want %q replayed", r, alice.body)
	}
	if r := send(t, srv, "/orders", "", "k", `{}`); r.status != http.StatusUnauthorized {
		t.Errorf("no principal = %+v, want 401", r)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}

func TestReleaseStatusesAreConfigurable(t *testing.T) {
	t.Parallel()
	a := serve(t, memory.New(memory.Config{}), idempotency.Options{ReleaseStatuses: []int{}}, &api{status: func(int32) int { return http.StatusTooManyRequests }})
	send(t, a.srv, "/orders", "Bearer alice", "k", `{}`)
	if r := send(t, a.srv, "/orders", "Bearer alice", "k", `{}`); !r.replayed {
		t.Errorf("a 429 with no release statuses = %+v, want it stored and replayed", r)
	}
	_, err := idempotency.New(idempotency.Options{Store: memory.New(memory.Config{}), SharedKeys: true, ReleaseStatuses: []int{503}})
	if err == nil || !strings.Contains(err.Error(), "ReleaseStatuses") {
		t.Errorf("ReleaseStatuses 503: err = %v, want it refused", err)
	}
	if _, err := idempotency.New(idempotency.Options{Store: memory.New(memory.Config{}), SharedKeys: true}); err != nil {
		t.Errorf("SharedKeys, said explicitly: %v", err)
	}
}

// TestFingerprintKeepsTheEscapedPath: /accounts/a%2Fb/close and
// /accounts/a/b/close are two routes (two accounts); the key sent with one
// and then the other is another request (422), never the first replayed.
func TestFingerprintKeepsTheEscapedPath(t *testing.T) {
	t.Parallel()
	a := httptest.NewRequest(http.MethodPost, "http://api/accounts/a%2Fb/close", nil)
	b := httptest.NewRequest(http.MethodPost, "http://api/accounts/a/b/close", nil)
	if idempotency.RequestFingerprint(a, nil) == idempotency.RequestFingerprint(b, nil) {
		t.Errorf("%s and %s have one fingerprint", a.URL.EscapedPath(), b.URL.EscapedPath())
	}
	var runs atomic.Int32
	mw := middleware(t, memory.New(memory.Config{}), idempotency.Options{})
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "closed %s (run %d)", r.URL.EscapedPath(), runs.Add(1))
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	if r := send(t, srv, "/accounts/a%2Fb/close", "Bearer alice", "k", `{}`); r.status != http.StatusOK {
		t.Fatalf("first = %+v", r)
	}
	if r := send(t, srv, "/accounts/a/b/close", "Bearer alice", "k", `{}`); r.status != http.StatusUnprocessableEntity {
		t.Errorf("the key on another route = %+v, want 422", r)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}
