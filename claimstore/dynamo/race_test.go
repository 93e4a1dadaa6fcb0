package dynamo_test

import (
	"bytes"
	"context"
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
	"github.com/claimfirst/claimfirst/internal/awstest"
)

// TestLostTakeoverRacesDecideOnLastRow loses every takeover race of one
// Acquire on the wire: before each takeover write reaches the emulator,
// another acquirer takes the released row over and releases it again, and
// before the last one it completes it. The Acquire must decide on the last
// row it saw (a duplicate with the stored result), not answer "held
// elsewhere" with a completed row.
func TestLostTakeoverRacesDecideOnLastRow(t *testing.T) {
	t.Parallel()
	direct := client(t, nil)
	racer := newStore(t, direct, time.Now)
	upstream, err := url.Parse(os.Getenv("AWS_ENDPOINT_URL"))
	if err != nil {
		t.Fatal(err)
	}
	key := awstest.Name("race")
	ctx := context.Background()
	params := func(owner string) claimstore.AcquireParams {
		now := time.Now()
		return claimstore.AcquireParams{Key: key, Owner: owner, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	}
	win := func(complete bool) {
		a, err := racer.Acquire(ctx, params("racer"))
		if err != nil || a.Outcome != claimstore.Acquired {
			t.Errorf("racer's acquire = %v, %v", a.Outcome, err)
			return
		}
		if complete {
			err = racer.Complete(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "racer's result", ExpiresAt: time.Now().Add(time.Hour)})
		} else {
			err = racer.Release(ctx, claimstore.ReleaseParams{Holder: a.Claim.Holder()})
		}
		if err != nil {
			t.Errorf("racer's write: %v", err)
		}
	}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	var takeovers atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateItem") && bytes.Contains(body, []byte(":seen")) {
			n := takeovers.Add(1)
			win(n == 3) // the racer moves the row on first; the last time it completes it
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	cfg := awstest.Config(t)
	cfg.BaseEndpoint = aws.String(proxy.URL)
	s := newStore(t, dynamodb.NewFromConfig(cfg), time.Now)

	first, err := racer.Acquire(ctx, params("w0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := racer.Release(ctx, claimstore.ReleaseParams{Holder: first.Claim.Holder()}); err != nil {
		t.Fatal(err)
	}
	a, err := s.Acquire(ctx, params("loser"))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if n := takeovers.Load(); n != 3 {
		t.Fatalf("%d takeover writes, want 3 lost races", n)
	}
	if a.Outcome != claimstore.Duplicate || a.Claim.Result != "racer's result" {
		t.Fatalf("Acquire after three lost races = %v with %s row %q; want duplicate with the racer's result", a.Outcome, a.Claim.Status, a.Claim.Result)
	}
}
