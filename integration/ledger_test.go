package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/claimfirst/claimfirst/ledger"
)

// What a txProxy does with the TransactWriteItems requests it sees; every
// other request passes through.
const (
	// txDrop holds a transaction and never forwards it: the worker dies
	// after its handler and before its completion reaches DynamoDB.
	txDrop int32 = iota + 1
	// txApplyHold forwards a transaction and holds its answer: the
	// completion and the entry are applied, and the worker dies before it
	// learns so.
	txApplyHold
	// txHoldForward holds a transaction until release is closed, then
	// forwards it: a late completion from a holder whose lease ran out.
	txHoldForward
)

// txProxy is an HTTP proxy in front of the emulator for one worker process:
// a real wire on which the worker's transactions can be held, dropped or
// answered late.
type txProxy struct {
	url     string
	mode    int32
	held    atomic.Int32 // transactions that reached the proxy
	applied atomic.Int32 // transactions forwarded and answered by the emulator
	release chan struct{}
	closed  chan struct{} // the test is over: let held requests go
	rp      *httputil.ReverseProxy
}

func newTxProxy(t *testing.T, mode int32) *txProxy {
	t.Helper()
	upstream, err := url.Parse(os.Getenv("AWS_ENDPOINT_URL"))
	if err != nil || upstream.Host == "" {
		t.Fatalf("AWS_ENDPOINT_URL %q: %v", os.Getenv("AWS_ENDPOINT_URL"), err)
	}
	p := &txProxy{mode: mode, release: make(chan struct{}), closed: make(chan struct{}), rp: httputil.NewSingleHostReverseProxy(upstream)}
	p.rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		http.Error(w, err.Error(), http.StatusBadGateway)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		close(p.closed)
		srv.Close()
	})
	p.url = srv.URL
	return p
}

func (p *txProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".TransactWriteItems") {
		p.rp.ServeHTTP(w, r)
		return
	}
	// Read the whole request first: the server notices the client has gone
	// (and cancels r's context) only once the body is consumed.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	p.held.Add(1)
	gone := func() {
		select {
		case <-r.Context().Done(): // the worker was killed with its request open
		case <-p.closed:
		}
	}
	switch p.mode {
	case txDrop:
		gone()
	case txApplyHold:
		rec := httptest.NewRecorder()
		p.rp.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context())))
		if rec.Code == http.StatusOK {
			p.applied.Add(1)
		}
		gone()
	case txHoldForward:
		select {
		case <-p.release:
		case <-r.Context().Done():
			return
		case <-p.closed:
			return
		}
		p.rp.ServeHTTP(w, r)
	}
}

// ledgerEntries returns n entries over a handful of accounts, with credits
// and debits, and the balance and entry count each account must end with.
func ledgerEntries(prefix string, n int) ([]ledger.Entry, map[string]ledger.Account) {
	es := make([]ledger.Entry, n)
	want := map[string]ledger.Account{}
	for i := range es {
		amount := int64(100 + i)
		if i%3 == 2 {
			amount = -amount / 2
		}
		acct := fmt.Sprintf("%s_acct_%d", prefix, i%7)
		es[i] = ledger.Entry{EntryID: fmt.Sprintf("%s_%04d", prefix, i), Account: acct, Amount: amount}
		a := want[acct]
		a.Balance += amount
		a.Entries++
		want[acct] = a
	}
	return es, want
}

func (e *env) sendEntries(es []ledger.Entry) {
	e.t.Helper()
	bodies := make([]string, len(es))
	for i, en := range es {
		b, _ := json.Marshal(en)
		bodies[i] = string(b)
	}
	e.send(bodies...)
}

// ledgerTable creates a ledger table for the test.
func (e *env) ledgerTable() string {
	e.t.Helper()
	name := "ledger-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := ledger.CreateTable(context.Background(), e.ddb, name); err != nil {
		e.t.Fatal(err)
	}
	return name
}

// assertLedger checks every entry is in the table once, under its own
// account and amount, and every balance and entry count is exact.
func (e *env) assertLedger(table string, es []ledger.Entry, want map[string]ledger.Account) {
	e.t.Helper()
	ctx := context.Background()
	rows := map[string]map[string]ddbtypes.AttributeValue{}
	var start map[string]ddbtypes.AttributeValue
	for {
		out, err := e.ddb.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true), ExclusiveStartKey: start})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, it := range out.Items {
			rows[it[ledger.DefaultKeyAttribute].(*ddbtypes.AttributeValueMemberS).Value] = it
		}
		if start = out.LastEvaluatedKey; len(start) == 0 {
			break
		}
	}
	entries := 0
	for k := range rows {
		if strings.HasPrefix(k, "entry#") {
			entries++
		}
	}
	if entries != len(es) {
		e.t.Errorf("ledger has %d entry rows, want %d", entries, len(es))
	}
	for _, en := range es {
		row := rows[ledger.EntryKey(en.EntryID)]
		acct, _ := row[ledger.AttrAccount].(*ddbtypes.AttributeValueMemberS)
		amt, _ := row[ledger.AttrAmount].(*ddbtypes.AttributeValueMemberN)
		if acct == nil || amt == nil || acct.Value != en.Account || amt.Value != strconv.FormatInt(en.Amount, 10) {
			e.t.Errorf("entry %s row = %v, want account %s amount %d", en.EntryID, row, en.Account, en.Amount)
		}
	}
	for name, w := range want {
		got, err := ledger.ReadAccount(ctx, e.ddb, table, name)
		if err != nil {
			e.t.Fatal(err)
		}
		if got != w {
			e.t.Errorf("account %s = balance %d from %d entries, want %d from %d", name, got.Balance, got.Entries, w.Balance, w.Entries)
		}
	}
}

// completions counts the claims p completed (not the duplicates it found
// completed).
func completions(p *proc) int {
	return p.outcomeCountWhere("completed", func(l logLine) bool { return l.Msg == "completed" })
}

func ledgerWorker(table string, extra ...string) workerOptions {
	return workerOptions{extraEnv: append([]string{"HANDLER=ledger", "LEDGER_TABLE=" + table, "PROVIDER_URL="}, extra...)}
}

// TestLedgerCrash sends ledger entries, a third of them twice (a
// producer's retry), to two steady worker processes and a victim that is
// SIGKILLed again and again between its handler and its claim's
// completion: half the victims die before their transaction reaches
// DynamoDB (dropped on the wire), half after it was applied and before
// they hear back. Every entry is applied once and every balance is exact:
// a dropped transaction wrote nothing and its redelivery takes the claim
// over; an applied one wrote the entry with the completion, and its
// redelivery is a duplicate.
func TestLedgerCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{visibility: 3 * time.Second, maxReceive: 10})
	table := e.ledgerTable()
	es, want := ledgerEntries("crash", 300)
	msgs := append([]ledger.Entry(nil), es...)
	for i := 0; i < len(es); i += 3 {
		msgs = append(msgs, es[i])
	}
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	e.sendEntries(msgs)

	opts := ledgerWorker(table, "LOG_LEVEL=debug")
	opts.concurrency = 4
	e.start("steady-1", opts)
	e.start("steady-2", opts)
	var kills, dropped, applied int
	deadline := time.Now().Add(3 * time.Minute)
	drained := func() bool { return e.queueDepth(e.queueURL) == 0 }
	for kills < 12 && !drained() && time.Now().Before(deadline) {
		mode := txDrop
		if kills%2 == 1 {
			mode = txApplyHold
		}
		px := newTxProxy(t, mode)
		vopts := ledgerWorker(table, "LOG_LEVEL=debug", "AWS_ENDPOINT_URL="+px.url)
		vopts.concurrency = 4
		victim := e.start(fmt.Sprintf("victim-%d", kills), vopts)
		reached := func() bool {
			if mode == txApplyHold {
				return px.applied.Load() > 0
			}
			return px.held.Load() > 0
		}
		for i := 1; !reached() && time.Now().Before(deadline); i++ {
			if i%20 == 0 && drained() {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond) // let others pile up behind it
		victim.kill()
		kills++
		if mode == txApplyHold {
			applied += int(px.applied.Load())
		} else {
			dropped += int(px.held.Load())
		}
		if n := completions(victim); n != 0 {
			t.Errorf("%s completed %d claims: its transactions were meant never to be answered", victim.name, n)
		}
	}
	e.waitDrained(2 * time.Minute)
	e.assertNoDeadLetters()
	e.assertLedger(table, es, want)

	takeovers, duplicates, leaseLost := 0, 0, 0
	for _, p := range e.procs {
		takeovers += p.outcomeCountWhere("completed", func(l logLine) bool { return l.Msg == "completed" && l.Token > 1 })
		duplicates += p.outcomeCount("duplicate")
		leaseLost += p.outcomeCount("lease_lost")
	}
	t.Logf("entries %d, messages %d, kills %d, transactions dropped with their worker %d, applied and unanswered %d, "+
		"completed after a takeover %d, duplicates acked %d, lease lost %d",
		len(es), len(msgs), kills, dropped, applied, takeovers, duplicates, leaseLost)
	if dropped == 0 || applied == 0 {
		t.Errorf("dropped %d, applied unanswered %d: a crash mode was not exercised", dropped, applied)
	}
	if takeovers == 0 {
		t.Error("no claim completed after a takeover: no dropped transaction was redelivered")
	}
	if duplicates < len(msgs)-len(es) {
		t.Errorf("duplicates acked %d, want at least the %d producer retries", duplicates, len(msgs)-len(es))
	}
}

// TestLedgerLeaseLost holds a worker's transaction on the wire past its
// lease: another worker takes the entry over and applies it; then the
// first transaction arrives. The claim's condition cancels it: the worker
// reports the lease lost, does not ack, and the balance moved once.
func TestLedgerLeaseLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{visibility: 3 * time.Second})
	table := e.ledgerTable()
	es, want := ledgerEntries("late", 1)
	e.sendEntries(es)
	px := newTxProxy(t, txHoldForward)
	sopts := ledgerWorker(table, "AWS_ENDPOINT_URL="+px.url)
	sopts.concurrency = 1
	slow := e.start("slow", sopts)
	waitFor(t, 30*time.Second, "the slow worker's transaction to reach the proxy", func() bool { return px.held.Load() == 1 })
	topts := ledgerWorker(table)
	topts.concurrency = 1
	taker := e.start("taker", topts)
	waitFor(t, 30*time.Second, "the taker to complete the entry", func() bool { return completions(taker) == 1 })
	close(px.release)
	waitFor(t, 15*time.Second, "the slow worker to report its lease lost", func() bool { return slow.logCount("lease lost at completion") == 1 })
	e.waitDrained(30 * time.Second)
	if n := slow.logCount("condition of the handler's writes"); n != 0 {
		t.Errorf("the late transaction was cancelled by the entry's own condition (%d), not the claim's", n)
	}
	if n := completions(slow); n != 0 {
		t.Errorf("the slow worker completed %d claims after its lease was lost", n)
	}
	claim := e.claim(es[0].EntryID)
	if claim["status"] != "COMPLETED" || claim["token"] != "2" {
		t.Errorf("claim = %v, want COMPLETED with the taker's token 2", claim)
	}
	e.assertLedger(table, es, want)
	e.assertNoDeadLetters()
	t.Logf("claim %v; slow worker: lease lost %d, completed %d", claim, slow.outcomeCount("lease_lost"), completions(slow))
}
