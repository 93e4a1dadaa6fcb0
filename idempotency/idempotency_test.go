package idempotency_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/idempotency"
	"github.com/claimfirst/claimfirst/internal/awstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// dynamoStore returns a new DynamoDB store on the shared emulator table:
// two calls are two processes sharing one table.
func dynamoStore(t *testing.T) claimstore.Store {
	t.Helper()
	client, table := awstest.ClaimTable(t, "idem")
	s, err := dynamo.New(dynamo.Config{Client: client, Table: table, KeyPrefix: "http#"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var backends = map[string]func(t *testing.T) claimstore.Store{
	"memory": func(*testing.T) claimstore.Store { return memory.New(memory.Config{KeyPrefix: "http#"}) },
	"dynamo": dynamoStore,
}

// eachBackend runs test as a parallel subtest per store.
func eachBackend(t *testing.T, test func(t *testing.T, s claimstore.Store)) {
	t.Helper()
	for name, newStore := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newStore(t))
		})
	}
}

// api is an HTTP API whose POST /orders creates an order, behind the middleware.
type api struct {
	runs  atomic.Int32
	delay time.Duration
	// status, if set, chooses each run's status (by run number, from 1).
	status func(run int32) int
	size   int // body bytes to answer with, if set
	srv    *httptest.Server
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := a.runs.Add(1)
	if a.delay > 0 {
		time.Sleep(a.delay)
	}
	status := http.StatusCreated
	if a.status != nil {
		status = a.status(n)
	}
	body, _ := io.ReadAll(r.Body)
	c, _ := idempotency.FromContext(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
	w.Header().Set("X-Not-Stored", "1")
	w.WriteHeader(status)
	if a.size > 0 {
		_, _ = w.Write([]byte(strings.Repeat("x", a.size)))
		return
	}
	_, _ = fmt.Fprintf(w, `{"order":%d,"token":%d,"request":%q}`, n, c.Token, body)
}

// middleware returns the middleware for opts on s, in a fresh scope.
func middleware(t *testing.T, s claimstore.Store, opts idempotency.Options) func(http.Handler) http.Handler {
	t.Helper()
	opts.Store = s
	opts.Logger = slog.New(slog.DiscardHandler)
	if opts.Scope == nil {
		opts.Scope = idempotency.Prefix(awstest.Name("orders") + "#") // a fresh scope: tests share the table
	}
	if opts.Client == nil && !opts.SharedKeys {
		opts.Client = authorizationHash(t, testSecret)
	}
	mw, err := idempotency.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func serve(t *testing.T, s claimstore.Store, opts idempotency.Options, h *api) *api {
	t.Helper()
	mw := middleware(t, s, opts)
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw(h))
	h.srv = httptest.NewServer(mux)
	t.Cleanup(h.srv.Close)
	return h
}

type reply struct {
	status   int
	replayed bool
	header   http.Header
	body     string
}

func post(t *testing.T, srv *httptest.Server, key, body string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Authorization", "Bearer alice")
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

func TestReplay(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store) {
		a := serve(t, s, idempotency.Options{}, &api{})
		first := post(t, a.srv, "k1", `{"sku":"A"}`)
		if first.status != http.StatusCreated || first.replayed || first.header.Get("Location") != "/orders/1" {
			t.Fatalf("first = %+v, want 201 at /orders/1, not replayed", first)
		}
		if first.header.Get("X-Not-Stored") != "1" {
			t.Errorf("first answer lost the handler's header: %v", first.header)
		}
		again := post(t, a.srv, "k1", `{"sku":"A"}`)
		if again.status != first.status || !again.replayed || again.body != first.body || again.header.Get("Location") != "/orders/1" ||
			again.header.Get("Content-Type") != "application/json" {
			t.Fatalf("again = %+v, want the first answer %+v replayed", again, first)
		}
		if again.header.Get("X-Not-Stored") != "" {
			t.Errorf("a header that is not in StoredHeaders was replayed: %v", again.header)
		}
		if n := a.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
		// Another key is another order.
		if other := post(t, a.srv, "k2", `{"sku":"A"}`); other.replayed || other.header.Get("Location") != "/orders/2" {
			t.Errorf("another key = %+v, want a new order", other)
		}
	})
}

func TestConcurrentRequestsWithOneKeyRunTheHandlerOnce(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store) {
		a := serve(t, s, idempotency.Options{}, &api{delay: 300 * time.Millisecond})
		const n = 20
		replies := make([]reply, n)
		begin := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-begin
				replies[i] = post(t, a.srv, "shared", `{"sku":"B"}`)
			})
		}
		close(begin)
		wg.Wait()
		var fresh, conflicts, replays int
		for _, r := range replies {
			switch {
			case r.status == http.StatusCreated && !r.replayed:
				fresh++
			case r.status == http.StatusCreated:
				replays++
			case r.status == http.StatusConflict:
				conflicts++
				if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
					t.Errorf("409 with Retry-After %q, want whole seconds >= 1", r.header.Get("Retry-After"))
				}
				if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
					t.Errorf("409 Content-Type = %q, want application/problem+json", ct)
				}
			default:
				t.Errorf("unexpected reply %+v", r)
			}
		}
		t.Logf("%d concurrent requests, one new key: %d ran, %d got 409, %d replays", n, fresh, conflicts, replays)
		if got := a.runs.Load(); got != 1 || fresh != 1 {
			t.Fatalf("handler ran %d times, %d fresh answers; want exactly 1", got, fresh)
		}
		if conflicts == 0 {
			t.Errorf("no request got 409 while the first ran for 300ms")
		}
	})
}

func TestAnotherRequestWithTheKeyIs422(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store) {
		a := serve(t, s, idempotency.Options{}, &api{})
		post(t, a.srv, "k", `{"sku":"A"}`)
		r := post(t, a.srv, "k", `{"sku":"B"}`)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "different request") {
			t.Fatalf("another body with the key = %+v, want 422", r)
		}
		if n := a.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}

func TestBadKeysAre400(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store) {
		a := serve(t, s, idempotency.Options{Required: true}, &api{})
		for _, tt := range []struct{ name, key, detail string }{
			{"missing", "", "header is missing"},
			{"too long", strings.Repeat("k", 256), "256 bytes, more than 255"},
			{"not UTF-8", "k\xff", "not valid UTF-8"},
		} {
			if r := post(t, a.srv, tt.key, `{}`); r.status != http.StatusBadRequest || !strings.Contains(r.body, tt.detail) {
				t.Errorf("%s key: %+v, want 400 saying %q", tt.name, r, tt.detail)
			}
		}
		if r := post(t, a.srv, strings.Repeat("k", 255), `{}`); r.status != http.StatusCreated {
			t.Errorf("a 255-byte key: %+v, want 201", r)
		}
		if n := a.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want once (for the valid key)", n)
		}
	})
}

func TestServerErrorReleasesTheKey(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store) {
		a := serve(t, s, idempotency.Options{}, &api{status: func(run int32) int {
			if run == 1 {
				return http.StatusServiceUnavailable
			}
			return http.StatusCreated
		}})
		if r := post(t, a.srv, "k", `{}`); r.status != http.StatusServiceUnavailable || r.replayed {
			t.Fatalf("first = %+v, want the handler's 503", r)
		}
		retry := post(t, a.srv, "k", `{}`)
		if retry.status != http.StatusCreated || retry.replayed || !strings.Contains(retry.body, `"token":2`) {
			t.Fatalf("retry = %+v, want the handler to run again under token 2", retry)
		}
		if r := post(t, a.srv, "k", `{}`); !r.replayed || r.body != retry.body {
			t.Errorf("third = %+v, want the retry's answer replayed", r)
		}
		if n := a.runs.Load(); n != 2 {
			t.Errorf("handler ran %d times, want 2", n)
		}
	})
}

func TestClientErrorIsStored(t *testing.T) {
	t.Parallel()
	a := serve(t, memory.New(memory.Config{}), idempotency.Options{}, &api{status: func(int32) int { return http.StatusPaymentRequired }})
	first := post(t, a.srv, "k", `{}`)
	if r := post(t, a.srv, "k", `{}`); r.status != http.StatusPaymentRequired || !r.replayed || r.body != first.body {
		t.Errorf("repeat of a 402 = %+v, want the 402 replayed", r)
	}
}

func TestResponseTooLargeToStoreIsRefusedClearly(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store) {
		a := serve(t, s, idempotency.Options{MaxResponseBytes: 1000}, &api{size: 1001})
		first := post(t, a.srv, "k", `{}`)
		if first.status != http.StatusCreated || len(first.body) != 1001 {
			t.Fatalf("first = %d with %d bytes, want the handler's 201 with 1001 bytes", first.status, len(first.body))
		}
		r := post(t, a.srv, "k", `{}`)
		var problem struct {
			Status int    `json:"status"`
			Detail string `json:"detail"`
		}
		if err := json.Unmarshal([]byte(r.body), &problem); err != nil {
			t.Fatalf("repeat body %q: %v", r.body, err)
		}
		if r.status != http.StatusInternalServerError || problem.Status != 500 ||
			!strings.Contains(problem.Detail, "(1046 bytes with its headers, more than the 1000 stored) cannot be replayed") {
			t.Errorf("repeat = %d %+v, want 500 saying the response was too large to replay", r.status, problem)
		}
		if n := a.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1: a response too large to store is no reason to run again", n)
		}
		// At the limit it is stored: 955 bytes of body, and 45 of the
		// stored headers' names and values (Content-Type: application/json,
		// Location: /orders/1).
		b := serve(t, s, idempotency.Options{MaxResponseBytes: 1000}, &api{size: 955})
		post(t, b.srv, "k", `{}`)
		if r := post(t, b.srv, "k", `{}`); !r.replayed || len(r.body) != 955 {
			t.Errorf("repeat of a 1000-byte answer = %d replayed %v with %d bytes, want it replayed", r.status, r.replayed, len(r.body))
		}
	})
}

func TestReplaySurvivesARestart(t *testing.T) {
	t.Parallel()
	scope := idempotency.Prefix(awstest.Name("orders") + "#")
	before := serve(t, dynamoStore(t), idempotency.Options{Scope: scope}, &api{})
	first := post(t, before.srv, "k", `{"sku":"A"}`)
	before.srv.Close()

	// A new process: a new store and middleware on the same table.
	after := serve(t, dynamoStore(t), idempotency.Options{Scope: scope}, &api{})
	again := post(t, after.srv, "k", `{"sku":"A"}`)
	if !again.replayed || again.status != first.status || again.body != first.body || again.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("after a restart = %+v, want %+v replayed", again, first)
	}
	if n := after.runs.Load(); n != 0 {
		t.Errorf("the restarted handler ran %d times, want 0", n)
	}
}

func TestScopesKeepKeysApart(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{})
	a := serve(t, s, idempotency.Options{Scope: idempotency.Prefix("tenant-a#"), SharedKeys: true}, &api{})
	b := serve(t, s, idempotency.Options{Scope: idempotency.Prefix("tenant-b#"), SharedKeys: true}, &api{})
	post(t, a.srv, "k", `{}`)
	if r := post(t, b.srv, "k", `{"other":1}`); r.status != http.StatusCreated || r.replayed {
		t.Errorf("the same key in another scope = %+v, want its own run", r)
	}
	if _, err := s.Get(t.Context(), idempotency.StoreKey("tenant-a#", "", "k")); err != nil {
		t.Errorf("scoped claim: %v", err)
	}
}

func TestUnkeyedAndOtherMethodsPassThrough(t *testing.T) {
	t.Parallel()
	h := &api{}
	mw, err := idempotency.New(idempotency.Options{Store: memory.New(memory.Config{}), Client: authorizationHash(t, testSecret)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(h))
	defer srv.Close()
	post(t, srv, "", `{}`)
	post(t, srv, "", `{}`)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/orders", nil)
	req.Header.Set("Idempotency-Key", "k")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if n := h.runs.Load(); n != 3 {
		t.Errorf("handler ran %d times, want 3: keys are optional, and GET is not claimed", n)
	}
}

func TestOptionsAreValidated(t *testing.T) {
	t.Parallel()
	_, err := idempotency.New(idempotency.Options{MaxResponseBytes: 1 << 20, MaxKeyBytes: 5000})
	if err == nil {
		t.Fatal("New accepted bad options")
	}
	for _, want := range []string{"Store is required", "MaxResponseBytes", "MaxKeyBytes", "Client is required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}
