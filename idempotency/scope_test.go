package idempotency_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/idempotency"
)

// TestScopesNeverMeet: a key in one scope and a key in another are two
// keys, however the scope and the key split one string between them.
func TestScopesNeverMeet(t *testing.T) {
	t.Parallel()
	// The client's tag as the middleware stores it: the first 128 bits of
	// a SHA-256 of its name.
	sum := sha256.Sum256([]byte("alice"))
	tag := hex.EncodeToString(sum[:16])
	bodyOnly := func(_ *http.Request, body []byte) string { return string(body) }
	for _, tc := range []struct {
		name         string
		opts         idempotency.Options
		scopeA, keyA string
		scopeB, keyB string
	}{
		{"shared keys", idempotency.Options{SharedKeys: true}, "pay", "out-1", "payout", "-1"},
		{"shared keys, body fingerprint", idempotency.Options{SharedKeys: true, Fingerprint: bodyOnly}, "pay", "out-1", "payout", "-1"},
		{"shared keys, an unscoped route", idempotency.Options{SharedKeys: true}, "", "pay#1", "pay#", "1"},
		{"client keys", idempotency.Options{Client: idempotency.Principal(principalKey{})}, "s#", "a" + tag + "#k", "s#" + tag + "#a", "k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			opts := tc.opts
			opts.Scope = func(r *http.Request) string { return r.Header.Get("X-Scope") }
			mw := middleware(t, memory.New(memory.Config{}), opts)
			inner := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				_, _ = fmt.Fprintf(w, "%s run %d", r.URL.Path, runs.Add(1))
			}))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, "alice")))
			}))
			t.Cleanup(srv.Close)
			post := func(path, scope, key string) (int, string) {
				t.Helper()
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, strings.NewReader(`{"amount":1}`))
				req.Header.Set("X-Scope", scope)
				req.Header.Set("Idempotency-Key", key)
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			if st, body := post("/a", tc.scopeA, tc.keyA); st != http.StatusCreated {
				t.Fatalf("scope %q key %q = %d %s", tc.scopeA, tc.keyA, st, body)
			}
			if st, body := post("/b", tc.scopeB, tc.keyB); st != http.StatusCreated || body != "/b run 2" {
				t.Errorf("scope %q key %q after scope %q key %q = %d %s, want its own run", tc.scopeB, tc.keyB, tc.scopeA, tc.keyA, st, body)
			}
		})
	}
}

func TestStoreKeyLayout(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("alice"))
	tag := hex.EncodeToString(sum[:16])
	for _, tc := range []struct{ scope, client, key, want string }{
		{"", "", "k", "k"}, // unscoped: as it always was
		{"", "alice", "k", tag + "#k"},
		{"pay", "", "out-1", "pay\x1eout-1"},
		{"payout", "", "-1", "payout\x1e-1"},
		{"orders#", "alice", "k", "orders#\x1e" + tag + "#k"},
	} {
		if got := idempotency.StoreKey(tc.scope, tc.client, tc.key); got != tc.want {
			t.Errorf("StoreKey(%q, %q, %q) = %q, want %q", tc.scope, tc.client, tc.key, got, tc.want)
		}
	}
}
