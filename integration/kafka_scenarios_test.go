package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/faultproxy"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
	"github.com/claimfirst/claimfirst/worker"
)

// Kafka's own scenarios, end to end: `worker run` processes on the kfake
// process, claims in PostgreSQL, effects counted by the fake provider and
// settlement read from the group's committed offsets.

// TestKafkaRebalance is the rebalance run: 2,000 payments, 5% of
// them produced twice, and a poison record; two workers, a third joins a
// quarter of the way and the first is SIGKILLed half way. Each payment is
// charged once, the poison is in the dead-letter topic with the headers
// that say why and where it was, and the group's committed offsets end
// equal to the partitions' end offsets.
func TestKafkaRebalance(t *testing.T) {
	k := newKafkaRun(t, "rebal")
	t.Parallel()
	began := time.Now()
	took := binaryPayments(t, k.broker(), paymentRun{payments: 2000, twice: 0.05, latency: 2 * time.Millisecond, deadline: 4 * time.Minute})
	dead, err := k.deadLetters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	k.checkPoisonDeadLetters(t, dead)
	k.claimsCompleted(t, 2000)
	t.Logf("2000 payments (2100 records and a poison) settled by the workers in %s; %d dead letters; the whole test %s",
		took.Round(time.Millisecond), len(dead), time.Since(began).Round(time.Millisecond))
}

// TestKafkaCrashBeforeCommit SIGKILLs a worker between a charge and the
// commit of its record's offset, and starts another: the payment is
// charged once, its record is replayed (by the provider, when the worker
// died before it heard the charge; by the claim, as a duplicate, when it
// died after completing it), and the committed offsets reach the end.
func TestKafkaCrashBeforeCommit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// completed kills the worker after its claim of a payment is
		// completed (its log says so) with every commit failing; otherwise
		// the provider's hook holds back the answer of a charge made and
		// the worker is killed waiting for it, once commits of its other
		// records had time to go out.
		completed bool
	}{
		{name: "killed as the provider charges"},
		{name: "killed after the claim completed", completed: true},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			k := newKafkaRun(t, "crash")
			control := kafkaControl(t)
			t.Parallel()
			runKafkaCrash(t, k, control, c.completed)
		})
	}
}

// testWorkerHeader names, on a request to the fake provider, the worker
// whose provider front it came through.
const testWorkerHeader = "X-Test-Worker"

func runKafkaCrash(t *testing.T, k *kafkaRun, control string, completed bool) {
	began := time.Now()
	k.setup(t)
	ps := payments(awstest.Name("crash"), 100)
	bodies := producedTwice(ps, 0.05)
	copies := map[string]int{} // by payment: the hook takes one produced once, whose record is known
	for _, b := range bodies {
		var p provider.Payment
		_ = json.Unmarshal([]byte(b), &p)
		copies[p.PaymentID]++
	}
	var armed atomic.Bool
	hit := make(chan provider.Payment, 1)
	resume := make(chan struct{})
	fake := fakeprovider.New(fakeprovider.Config{Latency: 5 * time.Millisecond, OnCharge: func(r *http.Request, p provider.Payment) {
		if r.Header.Get(testWorkerHeader) != "worker-1" || copies[p.PaymentID] != 1 || !armed.CompareAndSwap(true, false) {
			return
		}
		hit <- p
		select { // the answer waits until worker-1 is dead
		case <-resume:
		case <-time.After(30 * time.Second):
		}
	}})
	t.Cleanup(fake.Close)
	// Each worker reaches the provider through a front of its own that
	// names it, so that the hook knows whose charge it sees.
	front := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Header.Set(testWorkerHeader, name)
			fake.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	metrics := lambdaFreePorts(t, 3)
	// A lease of 3s: the claim the dead worker held in progress is taken
	// over soon after; the provider's timeout is longer than the hook's
	// wait, so that worker-1 is killed still waiting for its answer.
	extra := []string{"CLAIM_LEASE=3s", "PROVIDER_TIMEOUT=10s"}
	start := func(i int) *proc {
		name := fmt.Sprintf("worker-%d", i+1)
		return startProc(t, name, k.runEnv(front(name), metrics[i], extra...))
	}
	var commits *kafkaFault
	if completed {
		// No commit can leave while the fault stands: the completed
		// record's offset is certainly not committed when worker-1 dies.
		commits = addKafkaFault(t, control, map[string]any{"request": "OffsetCommit", "group": k.group, "error": "UNKNOWN_SERVER_ERROR", "count": -1})
	}
	w1, w2 := start(0), start(1)
	k.groupStable(t, 2, 60*time.Second)
	armed.Store(!completed)
	k.produce(t, bodies)

	var victim, victimID string // the payment charged when worker-1 died, and its record (topic/partition/offset)
	if completed {
		waitFor(t, 60*time.Second, "worker-1 to complete a payment", func() bool {
			for _, l := range w1.logLinesContaining("") {
				if l["outcome"] == string(worker.OutcomeCompleted) {
					victim, _ = l["idempotency_key"].(string)
					victimID, _ = l["message_id"].(string)
					return true
				}
			}
			return false
		})
		w1.kill()
	} else {
		select {
		case p := <-hit:
			// Worker-1 waits for the answer while its other records
			// settle and their commits go out (every second): none may
			// pass the record whose charge is unanswered.
			victim = p.PaymentID
			time.Sleep(2500 * time.Millisecond)
			w1.kill()
			close(resume)
		case <-time.After(60 * time.Second):
			t.Fatal("worker-1 charged nothing within 60s")
		}
	}
	killedAt := time.Since(began)
	rec := struct {
		partition int32
		offset    int64
	}{offset: -1}
	k.mu.Lock()
	for _, r := range k.produced {
		id := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
		if string(r.Key) == victim && (victimID == "" || victimID == id) {
			rec.partition, rec.offset, victimID = r.Partition, r.Offset, id
			break
		}
	}
	k.mu.Unlock()
	if victim == "" || rec.offset < 0 {
		t.Fatalf("no record of the payment %q (%q) charged at the kill", victim, victimID)
	}
	if at, err := k.committed(context.Background(), rec.partition); err != nil {
		t.Fatal(err)
	} else if at > rec.offset {
		t.Errorf("partition %d committed to %d when worker-1 died, past the offset %d of %s, which was not settled", rec.partition, at, rec.offset, victim)
	}
	if commits != nil {
		t.Logf("%d commits failed before the kill", commits.hits(t))
		if err := commits.remove(); err != nil {
			t.Fatal(err)
		}
	}
	w3 := start(2) // the restart
	k.waitSettled(t, 90*time.Second, func() string { return fmt.Sprintf("%d charges", fake.Stats().Charges) })
	settled := time.Since(began)
	stopCleanly(t, w2, w3)
	st := fake.Stats()
	chargedOnce(t, st.ChargesByPayment, ps)
	k.claimsCompleted(t, len(ps))
	// Who took the victim's record over, and how it ended there.
	var outcomes []string
	for _, w := range []*proc{w2, w3} {
		for _, l := range w.logLinesContaining("") {
			if l["message_id"] == victimID {
				if o, _ := l["outcome"].(string); o != "" {
					outcomes = append(outcomes, w.name+":"+o)
				}
			}
		}
	}
	if completed {
		if !containsSuffix(outcomes, ":"+string(worker.OutcomeDuplicate)) {
			t.Errorf("the record %s of the completed payment %s ended %v after the kill, want a duplicate replayed", victimID, victim, outcomes)
		}
	} else {
		if st.Replays == 0 {
			t.Errorf("the provider replayed nothing: the payment %s charged as worker-1 died was not retried with its key", victim)
		}
		if !containsSuffix(outcomes, ":"+string(worker.OutcomeCompleted)) {
			t.Errorf("the record %s of the payment %s charged as worker-1 died ended %v after the kill, want completed (the provider's replay)", victimID, victim, outcomes)
		}
	}
	t.Logf("worker-1 SIGKILLed at %s with %s (record %s) charged and uncommitted; after the restart: %v; settled at %s; "+
		"%d charges, %d provider replays", killedAt.Round(time.Millisecond), victim, victimID, outcomes,
		settled.Round(time.Millisecond), st.Charges, st.Replays)
}

func containsSuffix(ss []string, suffix string) bool {
	for _, s := range ss {
		if strings.HasSuffix(s, suffix) {
			return true
		}
	}
	return false
}

// TestKafkaCommitFails fails every OffsetCommit of the group for a while,
// with a worker consuming and a second joining meanwhile (so a revoke's
// commit fails too): each payment is charged once, nothing is
// dead-lettered, no worker exits, and the committed offsets reach the
// end once commits succeed again. The faults are kfake's, through the
// emulator's control.
func TestKafkaCommitFails(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err     string
		applied bool // the broker applies the commit, then answers with the error
	}{
		{err: "NOT_COORDINATOR"},      // retriable: the client looks the coordinator up again
		{err: "UNKNOWN_SERVER_ERROR"}, // not retriable
		{err: "REQUEST_TIMED_OUT", applied: true},
	} {
		t.Run(c.err, func(t *testing.T) {
			k := newKafkaRun(t, "commitfail")
			control := kafkaControl(t)
			t.Parallel()
			began := time.Now()
			k.setup(t)
			fake, srv := fakeprovider.StartTest(t, fakeprovider.Config{Latency: 5 * time.Millisecond})
			metrics := lambdaFreePorts(t, 2)
			w1 := startProc(t, "worker-1", k.runEnv(srv.URL, metrics[0]))
			k.groupStable(t, 1, 60*time.Second)
			f := addKafkaFault(t, control, map[string]any{"request": "OffsetCommit", "group": k.group, "error": c.err, "count": -1})
			ps := payments(awstest.Name("cf"), 150)
			bodies := producedTwice(ps, 0.05)
			k.produce(t, bodies[:len(bodies)/2])
			waitFor(t, 60*time.Second, "worker-1 to settle payments and fail to commit them", func() bool {
				n, _ := finalOutcomes(metrics[:1])
				return n >= len(bodies)/4 && f.hits(t) >= 2
			})
			w2 := startProc(t, "worker-2", k.runEnv(srv.URL, metrics[1]))
			k.produce(t, bodies[len(bodies)/2:])
			k.groupStable(t, 2, 60*time.Second)
			time.Sleep(3 * time.Second) // commits keep failing with both members at work
			if !c.applied {
				if at, err := k.anyCommitted(context.Background()); err != nil {
					t.Fatal(err)
				} else if at != "" {
					t.Errorf("%s committed while every commit failed", at)
				}
			}
			for _, w := range []*proc{w1, w2} {
				select {
				case <-w.done:
					t.Fatalf("%s exited while commits failed: %v", w.name, w.err)
				default:
				}
			}
			failed := f.hits(t)
			if err := f.remove(); err != nil {
				t.Fatal(err)
			}
			ended := time.Now()
			k.waitSettled(t, 60*time.Second, func() string {
				n, o := finalOutcomes(metrics)
				return fmt.Sprintf("%d of %d settled (%s), %d charges", n, len(bodies), o, fake.Stats().Charges)
			})
			caughtUp := time.Since(ended)
			stopCleanly(t, w1, w2)
			st := fake.Stats()
			chargedOnce(t, st.ChargesByPayment, ps)
			k.claimsCompleted(t, len(ps))
			dead, err := k.deadLetters(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(dead) != 0 {
				t.Errorf("%d records dead-lettered, want none", len(dead))
			}
			dups := w1.outcomeCount(string(worker.OutcomeDuplicate)) + w2.outcomeCount(string(worker.OutcomeDuplicate))
			t.Logf("%s: %d commits failed; committed offsets at the end %s after the fault ended; %d records (%d payments) charged %d times, %d replayed as duplicates; whole test %s",
				c.err, failed, caughtUp.Round(time.Millisecond), len(bodies), len(ps), st.Charges, dups, time.Since(began).Round(time.Millisecond))
		})
	}
}

// TestKafkaProviderOutage mirrors TestOutages' provider case on Kafka: the
// provider answers 503 to everything for a while as payments keep
// arriving to two workers. No valid record is dead-lettered (the poison
// produced during the outage is, with its headers), every payment is
// charged once after the outage, no worker exits, each worker's breaker
// opens and /readyz answers 503 naming the provider meanwhile, and both are back to closed and
// 200 after; the committed offsets reach the end.
func TestKafkaProviderOutage(t *testing.T) {
	k := newKafkaRun(t, "outage")
	t.Parallel()
	began := time.Now()
	k.setup(t)
	fake, srv := fakeprovider.StartTest(t, fakeprovider.Config{Latency: 5 * time.Millisecond})
	px := startProxy(t, srv.URL)
	metrics := lambdaFreePorts(t, 2)
	addrs := []string{"http://" + metrics[0], "http://" + metrics[1]}
	workers := []*proc{
		startProc(t, "worker-1", k.runEnv(px.URL, metrics[0], "OUTAGE_COVER=5m")),
		startProc(t, "worker-2", k.runEnv(px.URL, metrics[1], "OUTAGE_COVER=5m")),
	}
	k.groupStable(t, 2, 60*time.Second)
	ps := payments(awstest.Name("out"), 150)
	k.produce(t, producedTwice(ps[:30], 0))
	waitFor(t, 60*time.Second, "payments to flow", func() bool { n, _ := finalOutcomes(metrics); return n >= 10 })

	const length = 15 * time.Second
	b, _ := json.Marshal(provider.ErrorResponse{Error: provider.ErrorDetail{Type: "unavailable", Message: "down for maintenance"}})
	rule := px.Add(&faultproxy.Rule{Name: "provider 503", Match: faultproxy.Any,
		Fault: faultproxy.Respond(503, http.Header{"Content-Type": {"application/json"}}, string(b))})
	outage := time.Now()
	rest, chunks, sent := ps[30:], 5, 0
	poisonSent := false
	notReady := make([]bool, len(workers))
	opened := make([]float64, len(workers))
	for time.Since(outage) < length {
		if next := sent / (len(rest) / chunks); sent < len(rest) && time.Since(outage) >= time.Duration(next)*length/time.Duration(chunks) {
			n := min(len(rest)/chunks, len(rest)-sent)
			k.produce(t, producedTwice(rest[sent:sent+n], 0.05))
			sent += n
		}
		if !poisonSent && time.Since(outage) > length/3 {
			k.produce(t, []string{`{"payment_id": "out_poison", "amount": 1`})
			poisonSent = true
		}
		for i, a := range addrs {
			if code, why := readyz(a); code == http.StatusServiceUnavailable {
				notReady[i] = true
				if !strings.Contains(why, "provider") {
					t.Errorf("%s: /readyz 503 %q during the outage, want it to name the provider", workers[i].name, why)
				}
			}
			opened[i] = metric(t, a, "claimfirst_breaker_opens_total", "")
		}
		time.Sleep(500 * time.Millisecond)
	}
	if sent < len(rest) {
		k.produce(t, producedTwice(rest[sent:], 0.05))
	}
	rule.Off()
	recovered := time.Now()
	k.waitSettled(t, 2*time.Minute, func() string {
		n, o := finalOutcomes(metrics)
		return fmt.Sprintf("%d settled (%s), %d charges", n, o, fake.Stats().Charges)
	})
	drain := time.Since(recovered)
	for _, w := range workers {
		select {
		case <-w.done:
			t.Errorf("%s exited during the test: %v", w.name, w.err)
		default:
		}
	}
	st := fake.Stats()
	chargedOnce(t, st.ChargesByPayment, ps)
	k.claimsCompleted(t, len(ps))
	for i, w := range workers {
		openNow := metric(t, addrs[i], "claimfirst_breaker_open", "provider")
		opens := metric(t, addrs[i], "claimfirst_breaker_opens_total", "")
		if opened[i] == 0 || opens == 0 {
			t.Errorf("%s: claimfirst_breaker_opens_total %v during the outage, %v after: the breaker never opened", w.name, opened[i], opens)
		}
		if openNow != 0 {
			t.Errorf("%s: claimfirst_breaker_open{dependency=\"provider\"} = %v after the topic drained, want 0", w.name, openNow)
		}
		if !notReady[i] {
			t.Errorf("%s: /readyz never answered 503 (naming the provider) during the outage", w.name)
		}
		if s := status(t, addrs[i]+"/readyz"); s != http.StatusOK {
			t.Errorf("%s: /readyz %d after the outage, want 200", w.name, s)
		}
	}
	dead, err := k.deadLetters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	k.checkPoisonDeadLetters(t, dead)
	stopCleanly(t, workers...)
	t.Logf("provider 503 for %s: drained %s after recovery; %d payments charged %d times, provider calls %d, requests faulted %d; "+
		"%d dead letters; breaker opened w1 %v w2 %v; whole test %s",
		length, drain.Round(100*time.Millisecond), len(ps), st.Charges, st.Calls, rule.Injected(), len(dead),
		opened[0], opened[1], time.Since(began).Round(time.Millisecond))
}
