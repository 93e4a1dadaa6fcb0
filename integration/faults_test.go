package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/internal/faultproxy"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
	"github.com/claimfirst/claimfirst/worker"
)

// The tests in this file put a fault-injecting proxy (internal/faultproxy)
// on the wire between a worker process and one of its dependencies: the
// emulator's DynamoDB (AWS_ENDPOINT_URL_DYNAMODB points the worker's SDK at
// the proxy, SQS goes straight to the emulator) or the fake provider
// (PROVIDER_URL).

// startProxy serves a fault proxy in front of upstream for the test's life.
func startProxy(t *testing.T, upstream string) *faultproxy.Proxy {
	t.Helper()
	px, err := faultproxy.Start(upstream, uint64(len(t.Name())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	return px
}

// keepLogs writes every worker's whole log to a file when the test fails
// (or INTEGRATION_KEEP_LOGS is set), and says where: the harness shows only
// their last lines.
func (e *env) keepLogs() {
	e.t.Cleanup(func() {
		if !e.t.Failed() && os.Getenv("INTEGRATION_KEEP_LOGS") == "" {
			return
		}
		dir, err := os.MkdirTemp("", "claimfirst-faults-")
		if err != nil {
			return
		}
		for _, p := range e.procs {
			path := filepath.Join(dir, p.name+".log")
			if os.WriteFile(path, []byte(p.log.String()), 0o644) == nil {
				e.t.Logf("%s's whole log: %s", p.name, path)
			}
		}
	})
}

// dynamoThrough returns the worker environment that sends its DynamoDB
// calls, and only those, through px.
func dynamoThrough(px *faultproxy.Proxy) string { return "AWS_ENDPOINT_URL_DYNAMODB=" + px.URL }

// emulatorURL is the emulator's endpoint, as with-emulator.sh exports it.
func emulatorURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("AWS_ENDPOINT_URL")
	if u == "" {
		t.Fatal("AWS_ENDPOINT_URL is not set: run under emulator/with-emulator.sh")
	}
	return u
}

// renewWrite matches the claim store's Renew, not Complete or Release: the
// one UpdateItem that sets only the lease and the expiry.
var renewWrite = faultproxy.All(faultproxy.Target("UpdateItem"), faultproxy.BodyContains(`SET #lease = :lease`))

// TestClaimWriteFaults runs one worker over 200 distinct payments while the
// claim store's requests fail: answers dropped after DynamoDB applied the
// write (the SDK retries, and the retry finds the worker's own write, which
// the acquisition id must recognize), throttling, and 500s. Whatever the
// fault, a message is never "held elsewhere" by its own claim (deferred) nor
// reports a lost lease; each payment is charged once, none dead-lettered.
func TestClaimWriteFaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		match faultproxy.Match
		p     float64
		fault faultproxy.Fault
	}{
		{"lost answers", faultproxy.Target("PutItem", "UpdateItem"), 0.12, faultproxy.Drop()},
		{"throttling", faultproxy.TargetPrefix("DynamoDB_"), 0.3,
			faultproxy.AWSError(400, "ThrottlingException", "Rate of requests exceeds the allowed throughput.")},
		{"internal errors", faultproxy.TargetPrefix("DynamoDB_"), 0.2,
			faultproxy.AWSError(500, "InternalServerError", "Internal server error")},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			// A 10 s visibility: a lease that runs out because the machine
			// is slow is a lost lease too, and not what this test is about.
			e := newEnv(t, envOptions{visibility: 10 * time.Second})
			e.keepLogs()
			px := startProxy(t, emulatorURL(t))
			fault := px.Add(&faultproxy.Rule{Name: c.name, Match: c.match, Probability: c.p, Fault: c.fault})
			ps := payments(strings.ReplaceAll(c.name, " ", ""), 200)
			e.sendPayments(ps)
			w := e.start("w1", workerOptions{extraEnv: []string{dynamoThrough(px)}})
			e.waitDrained(2 * time.Minute)
			st := e.assertChargedOnce(ps)
			if code := w.stop(t, 30*time.Second); code != 0 {
				t.Errorf("worker exited %d", code)
			}
			deferred, lost := w.outcomeCount("deferred"), w.outcomeCount("lease_lost")
			t.Logf("payments %d, charges %d, DynamoDB requests matched %d, faulted %d; deferred %d, lease lost %d, "+
				"store steps retried in process %d, completed %d",
				len(ps), st.Charges, fault.Matched(), fault.Injected(), deferred, lost,
				w.logCount("retrying in process"), w.outcomeCount("completed"))
			if fault.Injected() < 20 {
				t.Errorf("only %d requests faulted: the fault was not exercised", fault.Injected())
			}
			if deferred != 0 || lost != 0 {
				t.Errorf("deferred %d, lease lost %d: want 0 and 0 (nobody else held any claim)", deferred, lost)
			}
			e.assertNoDeadLetters()
		})
	}
}

// TestRenewHangs makes the heartbeat's Renew hang (the store accepted the
// request and went silent) while the handler waits on a slow provider. The
// lease watchdog must cancel the handler when the lease ends, within the
// margin, and that holder must not complete or ack; the redelivery takes
// the claim over and completes it.
func TestRenewHangs(t *testing.T) {
	t.Parallel()
	// Visibility 3 s: the lease ends 300 ms (the margin) before the
	// visibility, a heartbeat is due every second, and the provider takes
	// longer than the whole lease.
	const margin = 300 * time.Millisecond
	e := newEnv(t, envOptions{visibility: 3 * time.Second, fake: fakeprovider.Config{Latency: 4 * time.Second}})
	px := startProxy(t, emulatorURL(t))
	ps := payments("hang", 1)
	e.sendPayments(ps)
	w := e.start("w1", workerOptions{concurrency: 1, extraEnv: []string{dynamoThrough(px), "LOG_LEVEL=debug"}})
	// The hang starts once the handler is charging: on a slow machine the
	// claim can take longer than a heartbeat to win, and the renew before the
	// handler starts must not be the one that hangs.
	waitFor(t, 30*time.Second, "the handler to call the provider", func() bool { return e.fake.Stats().Calls >= 1 })
	hang := px.Add(&faultproxy.Rule{Name: "renew hangs", Match: renewWrite, Limit: 1, Fault: faultproxy.Hang(time.Minute)})
	waitFor(t, time.Minute, "the payment to complete", func() bool { return w.outcomeCount("completed") == 1 })
	e.waitDrained(time.Minute)
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}

	if hang.Injected() != 1 {
		t.Fatalf("%s: want the first renew held", hang)
	}
	expired := w.logLinesContaining("lease expired before it was renewed")
	if len(expired) != 1 {
		t.Fatalf("%d \"lease expired\" lines, want 1", len(expired))
	}
	leaseUntil, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(expired[0]["lease_until"]))
	at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(expired[0]["time"]))
	late := at.Sub(leaseUntil)
	t.Logf("the handler was cancelled %s after its lease ended (margin %s); %s", late, margin, hang)
	if late < 0 || late > margin {
		t.Errorf("the handler was cancelled %s after its lease ended: want within the margin %s", late, margin)
	}
	hung, _ := expired[0]["token"].(float64)
	if n := w.outcomeCountWhere("completed", func(l logLine) bool { return l.Token == int64(hung) }); n != 0 {
		t.Errorf("the holder whose renew hung (token %v) completed %d times", hung, n)
	}
	completed := w.logLinesContaining("completed")
	if len(completed) != 1 {
		t.Fatalf("completed %d times, want once, by the taker", len(completed))
	}
	taker, _ := completed[0]["token"].(float64)
	if claim := e.claim(ps[0].PaymentID); claim["status"] != "COMPLETED" || claim["token"] != fmt.Sprint(taker) || taker <= hung {
		t.Errorf("claim = %v, completed by token %v; want COMPLETED by a taker after token %v", claim, taker, hung)
	}
	e.assertChargedOnce(ps)
	e.assertNoDeadLetters()
}

// TestKeyReuse sends a payment, then after it completed the same payment id
// with another amount (a producer bug) and a plain copy (a producer retry):
// the reuse is dead-lettered with a reason naming the key, the copy acked
// as a duplicate.
func TestKeyReuse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	p := provider.Payment{PaymentID: "reuse_0001", Amount: 1999, Currency: "EUR"}
	e.sendPayments([]provider.Payment{p})
	w := e.start("w1", workerOptions{})
	waitFor(t, time.Minute, "the payment to complete", func() bool { return w.outcomeCount("completed") == 1 })
	reused := p
	reused.Amount = 2999
	e.sendPayments([]provider.Payment{reused, p})
	e.waitDrained(time.Minute)
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d", code)
	}
	if n := w.outcomeCount("duplicate"); n != 1 {
		t.Errorf("%d duplicates acked, want 1 (the plain copy)", n)
	}
	dead := e.dlqMessages()
	if len(dead) != 1 {
		t.Fatalf("%d messages dead-lettered, want 1 (the reuse)", len(dead))
	}
	var body provider.Payment
	_ = json.Unmarshal([]byte(aws.ToString(dead[0].Body)), &body)
	reason := aws.ToString(dead[0].MessageAttributes[worker.ReasonAttribute].StringValue)
	t.Logf("dead-lettered %s with reason %q", aws.ToString(dead[0].Body), reason)
	if body != reused {
		t.Errorf("dead-lettered %+v, want the reused key's message %+v", body, reused)
	}
	if !strings.Contains(reason, p.PaymentID) {
		t.Errorf("reason %q does not name the key %q", reason, p.PaymentID)
	}
	st := e.fake.Stats()
	if st.Calls != 1 || st.ChargesByPayment[p.PaymentID] != 1 {
		t.Errorf("provider calls %d, charges of %s %d: want 1 and 1 (the reuse never reaches the provider)", st.Calls, p.PaymentID, st.ChargesByPayment[p.PaymentID])
	}
}

// outage is one dependency failure for TestOutages.
type outage struct {
	name       string
	dependency string // the breaker's dependency label
	dynamo     bool   // the proxy is in front of DynamoDB
	sqs        bool   // the proxy is in front of SQS (the test's own client is not)
	match      faultproxy.Match
	fault      faultproxy.Fault
	length     time.Duration
}

// TestOutages takes a dependency down while payments keep arriving, two
// worker processes, maxReceiveCount 5 and a 5 s visibility: no valid
// message may reach the dead-letter queue, every payment is charged once,
// no worker exits, each worker's breaker opens (readiness fails meanwhile)
// and closes again; a poison message sent during the outage is still
// dead-lettered on its first receive.
//
// The three outages run in parallel; go test runs only GOMAXPROCS parallel
// tests at once, so on a small machine pass -parallel 3 to overlap them all.
// The worker holds a failing message in process for up to 15 minutes (the
// default), longer than any of these outages, so no message needs to spend
// a receive on the outage itself; see runOutage for the outage cover.
func TestOutages(t *testing.T) {
	t.Parallel()
	providerError := func(status int, typ, msg string) faultproxy.Fault {
		b, _ := json.Marshal(provider.ErrorResponse{Error: provider.ErrorDetail{Type: typ, Message: msg}})
		return faultproxy.Respond(status, http.Header{"Content-Type": {"application/json"}}, string(b))
	}
	for _, c := range []outage{
		{name: "provider 503", dependency: "provider", match: faultproxy.Any,
			fault: providerError(503, "unavailable", "down for maintenance"), length: 35 * time.Second},
		{name: "provider 401", dependency: "provider", match: faultproxy.Any,
			fault: providerError(401, "authentication_error", "invalid API key"), length: 25 * time.Second},
		{name: "dynamodb 500", dependency: "claimstore", dynamo: true, match: faultproxy.TargetPrefix("DynamoDB_"),
			fault: faultproxy.AWSError(500, "InternalServerError", "internal server error"), length: 30 * time.Second},
		{name: "sqs 500", dependency: "sqs", sqs: true, match: faultproxy.TargetPrefix("AmazonSQS."),
			fault: faultproxy.AWSError(500, "InternalError", "internal error"), length: 25 * time.Second},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			runOutage(t, c)
		})
	}
}

func runOutage(t *testing.T, c outage) {
	e := newEnv(t, envOptions{visibility: 5 * time.Second, maxReceive: 5})
	e.keepLogs()
	// OUTAGE_COVER 5m instead of the hour: still many times each outage,
	// but a message's third receive then waits about 40 s instead of about
	// 4 minutes. On a loaded machine the emulator can be slow enough that an
	// acquisition outlasts its lease, spending a receive that has nothing to
	// do with the outage; with the hour of cover, such a message alone
	// outlasted the test's drain budget.
	extra := []string{"METRICS_ADDR=127.0.0.1:0", "OUTAGE_COVER=5m"}
	var px *faultproxy.Proxy
	switch {
	case c.dynamo:
		px = startProxy(t, emulatorURL(t))
		extra = append(extra, dynamoThrough(px))
	case c.sqs:
		px = startProxy(t, emulatorURL(t))
		extra = append(extra, "AWS_ENDPOINT_URL_SQS="+px.URL)
	default:
		px = startProxy(t, e.provURL)
		extra = append(extra, "PROVIDER_URL="+px.URL)
	}
	prefix := strings.ReplaceAll(c.name, " ", "")
	ps := payments(prefix, 150)
	workers := []*proc{e.start("w1", workerOptions{extraEnv: extra}), e.start("w2", workerOptions{extraEnv: extra})}
	addrs := make([]string, len(workers))
	for i, w := range workers {
		waitFor(t, 30*time.Second, w.name+" to serve metrics", func() bool { return w.logField("serving metrics", "addr") != "" })
		addrs[i] = w.logField("serving metrics", "addr")
	}

	// Some payments flow before the outage, the rest arrive during it.
	e.sendPayments(ps[:30])
	waitFor(t, time.Minute, "payments to flow", func() bool { return workers[0].outcomeCount("completed")+workers[1].outcomeCount("completed") >= 10 })
	rule := px.Add(&faultproxy.Rule{Name: c.name, Match: c.match, Fault: c.fault})
	began := time.Now()
	poison := fmt.Sprintf(`{"payment_id": %q, "amount": 1`, prefix+"_poison")
	rest, chunks := ps[30:], 6
	sent, poisonSent := 0, time.Time{}
	notReady := make([]bool, len(workers))
	opened := make([]float64, len(workers))
	for time.Since(began) < c.length {
		size := len(rest) / chunks
		if next := sent / size; sent < len(rest) && time.Since(began) >= time.Duration(next)*c.length/time.Duration(chunks) {
			n := min(size, len(rest)-sent)
			e.sendPayments(rest[sent : sent+n])
			sent += n
		}
		if poisonSent.IsZero() && time.Since(began) > c.length/3 {
			e.send(poison)
			poisonSent = time.Now()
		}
		for i, a := range addrs {
			if status(t, a+"/readyz") == http.StatusServiceUnavailable {
				notReady[i] = true
			}
			opened[i] = metric(t, a, "claimfirst_breaker_opens_total", "")
		}
		time.Sleep(500 * time.Millisecond)
	}
	if sent < len(rest) {
		e.sendPayments(rest[sent:])
	}
	rule.Off()
	recovered := time.Now()
	e.waitDrained(5 * time.Minute)
	drain := time.Since(recovered)

	for _, w := range workers {
		select {
		case <-w.done:
			t.Errorf("%s exited during the test: %v", w.name, w.err)
		default:
		}
	}
	st := e.assertChargedOnce(ps)
	for i, w := range workers {
		openNow := metric(t, addrs[i], "claimfirst_breaker_open", c.dependency)
		opens := metric(t, addrs[i], "claimfirst_breaker_opens_total", "")
		if opened[i] == 0 || opens == 0 {
			t.Errorf("%s: claimfirst_breaker_opens_total %v during the outage, %v after: the breaker never opened", w.name, opened[i], opens)
		}
		if openNow != 0 {
			t.Errorf("%s: claimfirst_breaker_open{dependency=%q} = %v after the queue drained, want 0", w.name, c.dependency, openNow)
		}
		if !notReady[i] {
			t.Errorf("%s: /readyz never answered 503 during the outage", w.name)
		}
		if s := status(t, addrs[i]+"/readyz"); s != http.StatusOK {
			t.Errorf("%s: /readyz %d after the outage, want 200", w.name, s)
		}
	}

	// Only the poison message is dead-lettered, at its first receive, with its reason.
	dead := e.dlqMessages()
	var poisonReceives []int
	var poisonAt time.Time
	for _, w := range workers {
		for _, l := range w.logLinesContaining("poison message") {
			rc, _ := l["attempt"].(float64)
			poisonReceives = append(poisonReceives, int(rc))
			poisonAt, _ = time.Parse(time.RFC3339Nano, fmt.Sprint(l["time"]))
		}
	}
	switch {
	case len(dead) != 1 || aws.ToString(dead[0].Body) != poison:
		t.Errorf("%d messages dead-lettered, want 1 (the poison message)", len(dead))
		for _, m := range dead {
			t.Logf("dead-lettered: %s", aws.ToString(m.Body))
		}
	case aws.ToString(dead[0].MessageAttributes[worker.ReasonAttribute].StringValue) == "":
		t.Errorf("the poison message has no %s", worker.ReasonAttribute)
	}
	if len(poisonReceives) != 1 || poisonReceives[0] != 1 {
		t.Errorf("the poison message was dead-lettered at receives %v, want once at its first", poisonReceives)
	}

	spent := receivesSpent(workers)
	var stops []int
	for _, w := range workers {
		if code := w.stop(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d", w.name, code)
		}
		stops = append(stops, w.logCount("breaker open"), w.logCount("breaker closed"))
	}
	t.Logf("%s for %s: drained %s after recovery; receives per message %s; charges %d, provider calls %d, requests faulted %d; "+
		"in-process retries w1 %d w2 %d; breaker opened/closed w1 %d/%d w2 %d/%d; "+
		"deferred %d, lease lost %d, lease expired %d; "+
		"poison dead-lettered %s after it was sent, %s after the outage began, reason %q",
		c.name, c.length, drain.Round(100*time.Millisecond), spent, st.Charges, st.Calls, rule.Injected(),
		workers[0].logCount("retrying in process"), workers[1].logCount("retrying in process"),
		stops[0], stops[1], stops[2], stops[3],
		countAll(workers, "deferred"), countAll(workers, "lease lost"), countAll(workers, "lease expired"),
		poisonAt.Sub(poisonSent).Round(100*time.Millisecond), poisonAt.Sub(began).Round(100*time.Millisecond), reasonOf(dead))
}

// countAll counts the log lines of every worker whose msg contains s.
func countAll(ws []*proc, s string) int {
	n := 0
	for _, w := range ws {
		n += w.logCount(s)
	}
	return n
}

func reasonOf(ms []types.Message) string {
	if len(ms) == 0 {
		return ""
	}
	return aws.ToString(ms[0].MessageAttributes[worker.ReasonAttribute].StringValue)
}

// receivesSpent summarizes the highest receive count each message was
// logged with: "1:140 2:9 3:1" is 140 messages done at their first
// receive, 9 at their second, 1 at its third.
func receivesSpent(ws []*proc) string {
	most := map[string]int{}
	for _, w := range ws {
		for _, l := range w.logLinesContaining("") {
			id, _ := l["message_id"].(string)
			rc, _ := l["attempt"].(float64)
			if id != "" && int(rc) > most[id] {
				most[id] = int(rc)
			}
		}
	}
	hist := map[int]int{}
	for _, rc := range most {
		hist[rc]++
	}
	keys := make([]int, 0, len(hist))
	for k := range hist {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d:%d", k, hist[k])
	}
	return strings.Join(parts, " ")
}

// status returns the status code of a GET, or 0 if it failed.
func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// metric returns the sum of a metric's samples on a worker's /metrics,
// those with the dependency label only if dependency is not empty.
func metric(t *testing.T, addr, name, dependency string) float64 {
	t.Helper()
	resp, err := http.Get(addr + "/metrics")
	if err != nil {
		t.Errorf("scrape %s: %v", addr, err)
		return 0
	}
	defer resp.Body.Close()
	line := regexp.MustCompile(`^` + name + `(\{[^}]*\})? (\S+)$`)
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil || (dependency != "" && !strings.Contains(m[1], `dependency="`+dependency+`"`)) {
			continue
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		sum += v
	}
	return sum
}

// logLinesContaining returns the worker's JSON log lines whose msg contains s.
func (p *proc) logLinesContaining(s string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.log.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && strings.Contains(fmt.Sprint(line["msg"]), s) {
			out = append(out, line)
		}
	}
	return out
}
