package integration

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/worker"
)

// TestLambdaProviderOutage: in Lambda mode, records that fail through a
// provider outage (503, then 401 for a rotated key) are reported as batch
// item failures and hidden for the schedule's growing backoffs, none
// dead-lettered; a poison record in the outage is dead-lettered at once
// with its reason; when the provider is back, the next receive charges
// each payment once.
func TestLambdaProviderOutage(t *testing.T) {
	t.Parallel()
	rie := lambdaRIEBinary(t)
	e := newEnv(t, envOptions{visibility: 6 * lambdaFunctionTimeout * time.Second})

	// A real wire in front of the fake provider that answers outageStatus
	// to everything while it is set.
	var outageStatus atomic.Int64
	target, err := url.Parse(e.provURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := int(outageStatus.Load()); s != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(s)
			_, _ = w.Write([]byte(`{"error":{"type":"outage","message":"injected"}}`))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	fn := lambdaStart(t, rie, lambdaBuildBootstrap(t), []string{
		"QUEUE_URL=" + e.queueURL, "CLAIM_TABLE=" + e.table, "PROVIDER_URL=" + front.URL,
		"PROVIDER_TIMEOUT=2s", "PROVIDER_ATTEMPTS=2", "LOG_LEVEL=info",
	})

	ps := payments("lout", 6)
	var bodies []string
	for _, p := range ps {
		bodies = append(bodies, lambdaBody(t, p))
	}
	bodies = append(bodies, lambdaPoison)

	ev := e.lambdaEvent(bodies)
	var delays []time.Duration
	for round, status := range []int{http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusUnauthorized} {
		outageStatus.Store(int64(status))
		before := strings.Count(fn.log.String(), "\n")
		resp, raw := fn.invoke(t, ev)
		failed := lambdaFailures(t, resp)
		t.Logf("receive %d, provider %d: %d records, response %s", round+1, status, len(ev.Records), raw)
		var want []string
		for _, b := range bodies[:len(ps)] {
			want = append(want, lambdaRecordIDs(ev, b)...)
		}
		slices.Sort(want)
		if !slices.Equal(failed, want) {
			t.Fatalf("receive %d: reported %q, want every payment's record %q (and never the poison one)", round+1, failed, want)
		}
		d := maxVisibleIn(t, fn.log.String(), before)
		if d <= 0 {
			t.Fatalf("receive %d: no visibility backoff logged", round+1)
		}
		delays = append(delays, d)
		if round == 0 {
			// The poison record went at once, with its reason (dlqMessages
			// hides what it reads, so the end checks only for more).
			dead := e.dlqMessages()
			if len(dead) != 1 || aws.ToString(dead[0].Body) != lambdaPoison {
				t.Fatalf("after the first receive: %d dead-lettered, want only the poison record", len(dead))
			}
			if r := dead[0].MessageAttributes[worker.ReasonAttribute]; aws.ToString(r.StringValue) == "" {
				t.Error("the poison record has no reason")
			}
		}
		e.lambdaDeleteDone(ev, failed)
		// The failed records are hidden for their backoff (the first is
		// short, for a blip): a receive now gets none of them.
		if d >= 3*time.Second {
			out, err := e.sqs.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Messages) != 0 {
				t.Fatalf("receive %d: %d failed records visible at once, want them hidden for %v", round+1, len(out.Messages), d)
			}
		}
		// Time passes: make them visible now, as their backoff would.
		order := map[string]int{}
		for _, r := range ev.Records {
			if slices.Contains(failed, r.MessageId) {
				if _, err := e.sqs.ChangeMessageVisibility(t.Context(), &sqs.ChangeMessageVisibilityInput{
					QueueUrl: aws.String(e.queueURL), ReceiptHandle: aws.String(r.ReceiptHandle), VisibilityTimeout: 0,
				}); err != nil {
					t.Fatal(err)
				}
				order[r.MessageId] = len(order)
			}
		}
		ev = e.lambdaReceive(order)
	}
	for i := 1; i < len(delays); i++ {
		if delays[i] <= delays[i-1] {
			t.Errorf("backoffs %v: want each receive's longer than the last", delays)
		}
	}
	t.Logf("visibility backoffs per receive: %v", delays)
	// Five receives must outlast an hour: the delays grow geometrically from
	// a second, so the third is minutes long.
	if delays[2] < time.Minute {
		t.Errorf("backoffs %v: the third is under a minute; four of them cannot cover an hour's outage", delays)
	}

	// The provider is back: the fourth receive charges everything.
	outageStatus.Store(0)
	resp, raw := fn.invoke(t, ev)
	if failed := lambdaFailures(t, resp); len(failed) != 0 {
		t.Fatalf("after the outage: reported %q (%s), want none", failed, raw)
	}
	for _, r := range ev.Records {
		if rc := r.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]; rc != "4" {
			t.Errorf("record %s charged on receive %s, want 4 (of the queue's 5)", r.MessageId, rc)
		}
	}
	e.lambdaDeleteDone(ev, nil)
	e.assertChargedOnce(ps)
	if dead := e.dlqMessages(); len(dead) != 0 {
		t.Errorf("%d more messages dead-lettered after the poison record, want none", len(dead))
	}
	fn.checkLog(t)
}

// maxVisibleIn returns the longest visible_in of the "claim released" lines
// after the first skip lines of log.
func maxVisibleIn(t *testing.T, log string, skip int) time.Duration {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var longest time.Duration
	for n := 0; sc.Scan(); n++ {
		if n < skip {
			continue
		}
		var line struct {
			Msg       string          `json:"msg"`
			VisibleIn json.RawMessage `json:"visible_in"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || !strings.Contains(line.Msg, "claim released") {
			continue
		}
		var d time.Duration
		var s string
		if json.Unmarshal(line.VisibleIn, &s) == nil {
			d, _ = time.ParseDuration(s)
		} else {
			var ns int64
			_ = json.Unmarshal(line.VisibleIn, &ns)
			d = time.Duration(ns)
		}
		longest = max(longest, d)
	}
	return longest
}
