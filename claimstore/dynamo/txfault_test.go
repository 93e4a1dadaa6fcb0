package dynamo_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
)

// cancelled is DynamoDB's answer to a transaction cancelled for reason on
// its second item (the first write after the claim).
func cancelled(reason string) string {
	return `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException",` +
		`"Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [None, ` + reason + `]",` +
		`"CancellationReasons":[{"Code":"None"},{"Code":"` + reason + `","Message":"injected"}]}`
}

// TestCompleteTxFaults injects faults on the wire between the SDK and the
// emulator, on a transaction's first try only: throttling and a conflict
// with another transaction are cancellations that wrote nothing, and an
// answer lost after the transaction was applied is an unknown outcome. Each
// is retryable (neither a lost lease nor a write's condition), and the
// retry completes the claim with its writes applied once.
func TestCompleteTxFaults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		forward bool // apply the transaction before answering
		status  int
		body    string
	}{
		{"throttled", false, http.StatusBadRequest, cancelled("ThrottlingError")},
		{"conflict", false, http.StatusBadRequest, cancelled("TransactionConflict")},
		{"answer lost after applying", true, http.StatusInternalServerError, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected"}`},
	}
	f := newTxFixture(t, nil) // creates the table; its store is not used here
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			upstream, err := url.Parse(os.Getenv("AWS_ENDPOINT_URL"))
			if err != nil {
				t.Fatal(err)
			}
			rp := httputil.NewSingleHostReverseProxy(upstream)
			var faults atomic.Int32
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".TransactWriteItems") || !faults.CompareAndSwap(0, 1) {
					rp.ServeHTTP(w, r)
					return
				}
				if tc.forward {
					body, _ := io.ReadAll(r.Body)
					r.Body = io.NopCloser(bytes.NewReader(body))
					rec := httptest.NewRecorder()
					rp.ServeHTTP(rec, r)
					if rec.Code != http.StatusOK {
						t.Errorf("forwarded transaction: %d %s", rec.Code, rec.Body)
					}
				}
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer proxy.Close()
			cfg := awstest.Config(t)
			cfg.BaseEndpoint = aws.String(proxy.URL)
			cfg.RetryMaxAttempts = 1 // the caller retries, as the worker does
			s := newStore(t, dynamodb.NewFromConfig(cfg), time.Now)
			g := &txFixture{t: t, c: f.c, s: s}
			g.clock.Store(time.Now().UnixMilli())
			key, entry, acct := awstest.Name("tx"), awstest.Name("entry"), awstest.Name("acct")
			h := g.acquire(key)
			w := dynamo.Writes{g.put(entry), g.add(acct, 5)}
			err = s.CompleteTx(context.Background(), g.params(h, "ok"), w)
			var wce *claimstore.WriteConditionError
			if err == nil || errors.Is(err, claimstore.ErrLeaseLost) || errors.As(err, &wce) || errors.Is(err, claimstore.ErrInvalidParams) {
				t.Fatalf("first try = %v, want a retryable error", err)
			}
			if err := s.CompleteTx(context.Background(), g.params(h, "ok"), w); err != nil {
				t.Fatalf("retry = %v, want nil", err)
			}
			if got := g.counter(acct); got != "5" || g.status(key) != claimstore.StatusCompleted {
				t.Errorf("counter %s, claim %s; want 5 (applied once) and COMPLETED", got, g.status(key))
			}
		})
	}
}
