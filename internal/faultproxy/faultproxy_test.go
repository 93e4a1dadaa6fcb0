package faultproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// upstream counts the requests it applied and echoes the path and body.
func upstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var applied atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		applied.Add(1)
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" "+r.Host+" "+string(b))
	}))
	t.Cleanup(srv.Close)
	return srv, &applied
}

func start(t *testing.T, up string) *Proxy {
	t.Helper()
	p, err := Start(up, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// answer is what post read of a response.
type answer struct {
	StatusCode int
	Header     http.Header
}

func post(t *testing.T, ctx context.Context, p *Proxy, target, body string) (*answer, string, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/x?q=1", strings.NewReader(body))
	if target != "" {
		req.Header.Set("X-Amz-Target", target)
	}
	// A fresh connection each time: a dropped answer closes it.
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &answer{StatusCode: resp.StatusCode, Header: resp.Header}, string(b), nil
}

func TestForwardsUntouched(t *testing.T) {
	t.Parallel()
	up, applied := upstream(t)
	p := start(t, up.URL)
	resp, body, err := post(t, context.Background(), p, "", "hello")
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(p.URL, "http://")
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Upstream") != "yes" || body != "POST /x?q=1 "+host+" hello" {
		t.Errorf("got %d %q %q, want the upstream's 201 answer with the client's Host", resp.StatusCode, resp.Header, body)
	}
	if applied.Load() != 1 || p.Requests() != 1 {
		t.Errorf("applied %d, requests %d, want 1 and 1", applied.Load(), p.Requests())
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		rule        *Rule
		target      string
		wantStatus  int    // 0: the connection breaks
		wantBody    string // substring
		wantApplied int64
	}{
		{"respond to a target", &Rule{Match: Target("DynamoDB_20120810.PutItem"), Fault: AWSError(500, "InternalServerError", "boom")},
			"DynamoDB_20120810.PutItem", 500, `InternalServerError`, 0},
		{"short operation name", &Rule{Match: Target("PutItem"), Fault: AWSError(400, "ThrottlingException", "slow down")},
			"DynamoDB_20120810.PutItem", 400, "ThrottlingException", 0},
		{"other targets pass", &Rule{Match: Target("UpdateItem"), Fault: Respond(503, nil, "down")},
			"DynamoDB_20120810.PutItem", 201, "hello", 1},
		{"service prefix", &Rule{Match: TargetPrefix("AmazonSQS."), Fault: Respond(503, nil, "down")},
			"AmazonSQS.ReceiveMessage", 503, "down", 0},
		{"body predicate", &Rule{Match: All(Target("UpdateItem"), BodyContains("SET #lease")), Fault: Respond(401, nil, "no")},
			"DynamoDB_20120810.UpdateItem", 401, "no", 0},
		{"drop after applying", &Rule{Fault: Drop()}, "", 0, "", 1},
		{"probability zero draws pass", &Rule{Probability: 1e-12, Fault: Respond(503, nil, "down")}, "", 201, "hello", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up, applied := upstream(t)
			p := start(t, up.URL)
			r := p.Add(c.rule)
			body := "hello"
			if strings.Contains(c.name, "body") {
				body = `{"UpdateExpression":"SET #lease = :lease"}`
				c.wantBody = "no"
			}
			resp, got, err := post(t, context.Background(), p, c.target, body)
			switch {
			case c.wantStatus == 0:
				if err == nil {
					t.Fatalf("got %d %q, want a broken connection", resp.StatusCode, got)
				}
			case err != nil:
				t.Fatal(err)
			case resp.StatusCode != c.wantStatus || !strings.Contains(got, c.wantBody):
				t.Errorf("got %d %q, want %d with %q", resp.StatusCode, got, c.wantStatus, c.wantBody)
			}
			if applied.Load() != c.wantApplied {
				t.Errorf("upstream applied %d, want %d", applied.Load(), c.wantApplied)
			}
			wantInjected := int64(1)
			if c.wantApplied == 1 && c.wantStatus != 0 {
				wantInjected = 0
			}
			if r.Injected() != wantInjected {
				t.Errorf("%s; want injected %d", r, wantInjected)
			}
		})
	}
}

func TestOutageWindowAndCounters(t *testing.T) {
	t.Parallel()
	up, applied := upstream(t)
	p := start(t, up.URL)
	out := p.Add(&Rule{Name: "outage", Match: Target("GetItem"), Fault: AWSError(500, "InternalServerError", "down")})
	for range 3 {
		resp, _, err := post(t, context.Background(), p, "DynamoDB_20120810.GetItem", "x")
		if err != nil || resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("during the outage: %v %v, want 500", resp, err)
		}
	}
	if _, _, err := post(t, context.Background(), p, "DynamoDB_20120810.PutItem", "x"); err != nil {
		t.Fatal(err)
	}
	out.Off()
	resp, _, err := post(t, context.Background(), p, "DynamoDB_20120810.GetItem", "x")
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("after the outage: %v %v, want the upstream's 201", resp, err)
	}
	if out.Matched() != 3 || out.Injected() != 3 || applied.Load() != 2 {
		t.Errorf("%s, applied %d; want matched 3, injected 3, applied 2", out, applied.Load())
	}
	out.On()
	if resp, _, _ := post(t, context.Background(), p, "DynamoDB_20120810.GetItem", "x"); resp == nil || resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("switched on again: %v, want 500", resp)
	}
}

func TestLimit(t *testing.T) {
	t.Parallel()
	up, applied := upstream(t)
	p := start(t, up.URL)
	r := p.Add(&Rule{Limit: 2, Fault: Respond(503, nil, "down")})
	codes := ""
	for range 4 {
		resp, _, err := post(t, context.Background(), p, "", "x")
		if err != nil {
			t.Fatal(err)
		}
		codes += http.StatusText(resp.StatusCode)[:1]
	}
	if codes != "SSCC" || r.Injected() != 2 || r.Matched() != 4 || applied.Load() != 2 {
		t.Errorf("codes %q (S: 503, C: 201), %s, applied %d; want SSCC, injected 2 of 4, applied 2", codes, r, applied.Load())
	}
}

func TestProbabilityIsSeeded(t *testing.T) {
	t.Parallel()
	up, _ := upstream(t)
	pattern := func() string {
		p := start(t, up.URL)
		p.Add(&Rule{Probability: 0.3, Fault: Respond(503, nil, "down")})
		s := ""
		for range 60 {
			resp, _, err := post(t, context.Background(), p, "", "x")
			if err != nil {
				t.Fatal(err)
			}
			s += map[bool]string{true: "x", false: "."}[resp.StatusCode == http.StatusServiceUnavailable]
		}
		return s
	}
	a, b := pattern(), pattern()
	n := strings.Count(a, "x")
	if a != b || n < 8 || n > 30 {
		t.Errorf("patterns %s and %s (%d of 60 injected): want the same, about 18", a, b, n)
	}
}

func TestHang(t *testing.T) {
	t.Parallel()
	up, applied := upstream(t)
	p := start(t, up.URL)
	p.Add(&Rule{Fault: Hang(300 * time.Millisecond), Limit: 1})

	// Waited out: the request goes through late.
	start := time.Now()
	resp, _, err := post(t, context.Background(), p, "", "x")
	if err != nil || resp.StatusCode != http.StatusCreated || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("after %s: %v %v, want the upstream's answer after the hang", time.Since(start), resp, err)
	}

	// The client gives up first: nothing is forwarded.
	p.Add(&Rule{Fault: Hang(time.Hour)})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, _, err = post(t, ctx, p, "", "x")
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("after %s: %v, want the client's deadline", time.Since(start), err)
	}
	time.Sleep(50 * time.Millisecond)
	if applied.Load() != 1 {
		t.Errorf("upstream applied %d, want 1 (the abandoned request is never forwarded)", applied.Load())
	}
}

func TestStartRejectsRelativeUpstream(t *testing.T) {
	t.Parallel()
	if _, err := Start("localhost:1234", 1); err == nil {
		t.Error("Start accepted an upstream without a scheme")
	}
}

func TestShiftDate(t *testing.T) {
	t.Parallel()
	up, applied := upstream(t)
	p := start(t, up.URL)
	rule := p.Add(&Rule{Name: "skew", Fault: ShiftDate(-time.Hour)})
	date := func() time.Time {
		t.Helper()
		resp, err := http.Post(p.URL+"/x", "text/plain", strings.NewReader("b"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Upstream") != "yes" {
			t.Fatalf("answer %d %v: want the upstream's", resp.StatusCode, resp.Header)
		}
		d, err := http.ParseTime(resp.Header.Get("Date"))
		if err != nil {
			t.Fatalf("Date %q: %v", resp.Header.Get("Date"), err)
		}
		return d
	}
	if d := time.Since(date()); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("shifted Date is %s behind the clock, want an hour", d)
	}
	rule.Off()
	if d := time.Since(date()).Abs(); d > time.Minute {
		t.Errorf("unshifted Date is %s off the clock, want about 0", d)
	}
	if applied.Load() != 2 {
		t.Errorf("upstream applied %d requests, want 2 (both forwarded)", applied.Load())
	}
}
