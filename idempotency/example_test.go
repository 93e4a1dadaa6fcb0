package idempotency_test

import (
	"crypto/rand"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/idempotency"
)

// The server side of the Idempotency-Key draft on an http.ServeMux. In
// production the store is claimstore/dynamo, so that every instance of the
// API shares the keys and a replay survives a restart.
func Example() {
	// Each key belongs to the client that sent it: here, its credential,
	// hashed with a server secret (the same in every instance, kept across
	// restarts: read it from a secret store; this store, in memory, lives
	// only as long as the process, and so may its secret). Behind an
	// authentication middleware, Principal(ctxKey) instead.
	client, err := idempotency.AuthorizationHash(idempotency.Secret(rand.Text()))
	if err != nil {
		log.Fatal(err)
	}
	mw, err := idempotency.New(idempotency.Options{
		Store:    memory.New(memory.Config{}),
		Required: true,
		Scope:    idempotency.Prefix("orders#"), // one table, many APIs
		Client:   client,
	})
	if err != nil {
		log.Fatal(err)
	}
	var orders atomic.Int32
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := orders.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, n)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post := func(key, body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		req.Header.Set("Authorization", "Bearer sk_alice")
		resp, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 400 {
			b = []byte(resp.Header.Get("Content-Type"))
		}
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b))
	}
	post("a1", `{"sku":"tea"}`) // runs the handler
	post("a1", `{"sku":"tea"}`) // replays its response
	post("a1", `{"sku":"jam"}`) // the key with another request
	post("", `{"sku":"tea"}`)   // no key where one is required
	fmt.Println("orders:", orders.Load())
	// Output:
	// 201  {"order":1}
	// 201 true {"order":1}
	// 422  application/problem+json
	// 400  application/problem+json
	// orders: 1
}
