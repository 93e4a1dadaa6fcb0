package dynamo_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/internal/awsreq"
	"github.com/claimfirst/claimfirst/internal/awstest"
)

// txFixture is a store on the shared table with a clock the test moves, and
// helpers for the rows a transaction writes beside the claim (in the same
// table, under other keys).
type txFixture struct {
	t     *testing.T
	c     *dynamodb.Client
	s     *dynamo.Store
	clock atomic.Int64 // unix ms
}

func newTxFixture(t *testing.T, counter *awsreq.Counter) *txFixture {
	t.Helper()
	f := &txFixture{t: t, c: client(t, counter)}
	f.clock.Store(time.Now().UnixMilli())
	f.s = newStore(t, f.c, func() time.Time { return time.UnixMilli(f.clock.Load()) })
	return f
}

func (f *txFixture) now() time.Time { return time.UnixMilli(f.clock.Load()) }

func (f *txFixture) acquire(key string) claimstore.Holder {
	f.t.Helper()
	now := f.now()
	a, err := f.s.Acquire(context.Background(), claimstore.AcquireParams{Key: key, Owner: "w", LeaseUntil: now.Add(10 * time.Second), ExpiresAt: now.Add(time.Hour)})
	if err != nil || a.Outcome != claimstore.Acquired {
		f.t.Fatalf("Acquire(%s) = %v, %v", key, a.Outcome, err)
	}
	return a.Claim.Holder()
}

func (f *txFixture) params(h claimstore.Holder, result string) claimstore.CompleteParams {
	return claimstore.CompleteParams{Holder: h, Result: result, ExpiresAt: f.now().Add(time.Hour)}
}

// put appends a row under key if it is absent.
func (f *txFixture) put(key string) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                aws.String(table.name),
		Item:                     map[string]types.AttributeValue{"pk": &typesS{Value: key}, "note": &typesS{Value: "written"}},
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": "pk"},
	}}
}

// add moves the counter row under key by n.
func (f *txFixture) add(key string, n int64) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(table.name),
		Key:                       map[string]types.AttributeValue{"pk": &typesS{Value: key}},
		UpdateExpression:          aws.String("ADD #n :n"),
		ExpressionAttributeNames:  map[string]string{"#n": "n"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &typesN{Value: itoa(n)}},
	}}
}

// row returns the raw row under key (no prefix), nil if absent.
func (f *txFixture) row(key string) map[string]typesAV {
	f.t.Helper()
	out, err := f.c.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table.name), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &typesS{Value: key}},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out.Item
}

func (f *txFixture) counter(key string) string {
	if v, ok := f.row(key)["n"].(*typesN); ok {
		return v.Value
	}
	return "absent"
}

func (f *txFixture) status(key string) claimstore.Status {
	f.t.Helper()
	c, err := f.s.Get(context.Background(), key)
	if err != nil {
		f.t.Fatal(err)
	}
	return c.Status
}

// TestCompleteTx commits a claim's completion with two writes in one
// request, and a retry of the same completion (its answer lost) succeeds
// without applying the writes twice.
func TestCompleteTx(t *testing.T) {
	t.Parallel()
	counter := awsreq.NewCounter()
	f := newTxFixture(t, counter)
	ctx := context.Background()
	key, entry, acct := awstest.Name("tx"), awstest.Name("entry"), awstest.Name("acct")
	h := f.acquire(key)
	w := dynamo.Writes{f.put(entry), f.add(acct, 5)}
	counter.Reset()
	if err := f.s.CompleteTx(ctx, f.params(h, "ok"), w); err != nil {
		t.Fatal(err)
	}
	if got := counter.Service("DynamoDB"); got != 1 {
		t.Errorf("DynamoDB requests for a transactional completion = %d (%v), want 1", got, counter.Snapshot())
	}
	if err := f.s.CompleteTx(ctx, f.params(h, "ok"), w); err != nil {
		t.Errorf("retry of an applied transaction = %v, want nil", err)
	}
	c, err := f.s.Get(ctx, key)
	if err != nil || c.Status != claimstore.StatusCompleted || c.Result != "ok" {
		t.Errorf("claim = %+v, %v; want COMPLETED with result ok", c, err)
	}
	if f.row(entry) == nil {
		t.Error("entry row not written")
	}
	if got := f.counter(acct); got != "5" {
		t.Errorf("counter = %s, want 5 (added once)", got)
	}
}

// TestCompleteTxLeaseLost: a holder taken over after its lease ended
// commits nothing: the claim's condition cancels the transaction, which is
// reported as a lost lease, and neither write is applied.
func TestCompleteTxLeaseLost(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, nil)
	ctx := context.Background()
	key, entry, acct := awstest.Name("tx"), awstest.Name("entry"), awstest.Name("acct")
	stale := f.acquire(key)
	f.clock.Add((11 * time.Second).Milliseconds()) // past the lease
	taker := f.acquire(key)
	if taker.Token != stale.Token+1 {
		t.Fatalf("takeover token %d, want %d", taker.Token, stale.Token+1)
	}
	err := f.s.CompleteTx(ctx, f.params(stale, "late"), dynamo.Writes{f.put(entry), f.add(acct, 5)})
	if !errors.Is(err, claimstore.ErrLeaseLost) {
		t.Fatalf("CompleteTx by the superseded holder = %v, want ErrLeaseLost", err)
	}
	var wce *claimstore.WriteConditionError
	if errors.As(err, &wce) {
		t.Errorf("lease lost reported as a write condition too: %v", err)
	}
	if f.row(entry) != nil || f.counter(acct) != "absent" {
		t.Errorf("a cancelled transaction wrote: entry %v, counter %s", f.row(entry), f.counter(acct))
	}
	if got := f.status(key); got != claimstore.StatusInProgress {
		t.Errorf("claim status = %s, want the taker's IN_PROGRESS", got)
	}
	// The completed claim is fenced as well: nothing after completion.
	if err := f.s.CompleteTx(ctx, f.params(taker, "ok"), dynamo.Writes{f.add(acct, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := f.s.CompleteTx(ctx, f.params(stale, "late"), dynamo.Writes{f.add(acct, 5)}); !errors.Is(err, claimstore.ErrLeaseLost) {
		t.Errorf("CompleteTx after the taker completed = %v, want ErrLeaseLost", err)
	}
	if got := f.counter(acct); got != "1" {
		t.Errorf("counter = %s, want 1 (the taker's write only)", got)
	}
}

// TestCompleteTxWriteCondition: a write's own failed condition cancels the
// transaction as a WriteConditionError naming the write; the claim stays
// held, so the holder can still complete or release it.
func TestCompleteTxWriteCondition(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, nil)
	ctx := context.Background()
	entry, acct := awstest.Name("entry"), awstest.Name("acct")
	first := f.acquire(awstest.Name("tx"))
	if err := f.s.CompleteTx(ctx, f.params(first, "ok"), dynamo.Writes{f.put(entry)}); err != nil {
		t.Fatal(err)
	}
	key := awstest.Name("tx")
	h := f.acquire(key)
	err := f.s.CompleteTx(ctx, f.params(h, "ok"), dynamo.Writes{f.add(acct, 5), f.put(entry)})
	var wce *claimstore.WriteConditionError
	if !errors.As(err, &wce) || wce.Index != 1 {
		t.Fatalf("CompleteTx with an existing entry = %v, want a WriteConditionError at index 1", err)
	}
	if errors.Is(err, claimstore.ErrLeaseLost) {
		t.Errorf("a write's condition reported as lease lost: %v", err)
	}
	if got := f.counter(acct); got != "absent" {
		t.Errorf("counter = %s, want absent: the cancelled transaction wrote", got)
	}
	if got := f.status(key); got != claimstore.StatusInProgress {
		t.Errorf("claim status = %s, want IN_PROGRESS (still held)", got)
	}
	if err := f.s.Complete(ctx, f.params(h, "rejected")); err != nil {
		t.Errorf("Complete after the rejection = %v", err)
	}
}

// TestCompleteTxRefused: what DynamoDB would refuse is refused before it
// is sent, with an error that says why, and nothing is written.
func TestCompleteTxRefused(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, nil)
	ctx := context.Background()
	key := awstest.Name("tx")
	h := f.acquire(key)
	many := make(dynamo.Writes, dynamo.MaxTxItems)
	for i := range many {
		many[i] = f.add(awstest.Name("acct"), 1)
	}
	big := f.put(awstest.Name("entry"))
	big.Put.Item["blob"] = &typesS{Value: strings.Repeat("x", 300<<10)}
	bigs := dynamo.Writes{}
	for range 14 {
		b := f.put(awstest.Name("entry"))
		b.Put.Item["blob"] = big.Put.Item["blob"]
		bigs = append(bigs, b)
	}
	own := f.add(key, 1)
	own.Update.Key["pk"] = &typesS{Value: claimstore.StoredKey("svc#", key)}
	cases := []struct {
		name string
		w    claimstore.TxWrites
		want error
		says string
	}{
		{"100 writes", many, claimstore.ErrTxTooLarge, "101 items"},
		{"over 4 MB", bigs, claimstore.ErrTxTooLarge, "bytes"},
		{"no operation", dynamo.Writes{{}}, claimstore.ErrInvalidParams, "0 operations"},
		{"the claim's own row", dynamo.Writes{own}, claimstore.ErrInvalidParams, "claim's own row"},
		{"another store's writes", otherWrites{}, claimstore.ErrInvalidParams, "dynamo.Writes"},
	}
	for _, tc := range cases {
		err := f.s.CompleteTx(ctx, f.params(h, "ok"), tc.w)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: CompleteTx = %v, want %v saying %q", tc.name, err, tc.want, tc.says)
		}
	}
	if got := f.status(key); got != claimstore.StatusInProgress {
		t.Errorf("claim status = %s after refused transactions, want IN_PROGRESS", got)
	}
	// DynamoDB's own validation (a malformed expression) is invalid, not retryable.
	bad := f.add(awstest.Name("acct"), 1)
	bad.Update.UpdateExpression = aws.String("ADD")
	if err := f.s.CompleteTx(ctx, f.params(h, "ok"), dynamo.Writes{bad}); !errors.Is(err, claimstore.ErrInvalidParams) {
		t.Errorf("malformed write: CompleteTx = %v, want ErrInvalidParams", err)
	}
}

type otherWrites struct{}

func (otherWrites) Len() int { return 1 }

// TestCompleteTxUnsupported: a store that cannot run transactions says so
// and writes nothing, rather than completing the claim without the writes.
func TestCompleteTxUnsupported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ms := memory.New(memory.Config{})
	now := time.Now()
	a, err := ms.Acquire(ctx, claimstore.AcquireParams{Key: "k", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	p := claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "ok", ExpiresAt: now.Add(time.Hour)}
	if err := claimstore.CompleteTx(ctx, ms, p, otherWrites{}); !errors.Is(err, claimstore.ErrTxUnsupported) {
		t.Errorf("memory store: CompleteTx = %v, want ErrTxUnsupported", err)
	}
	if c, _ := ms.Get(ctx, "k"); c.Status != claimstore.StatusInProgress {
		t.Errorf("memory claim status = %s, want IN_PROGRESS", c.Status)
	}
	// A DynamoDB client without TransactWriteItems: unsupported, before sending.
	s, err := dynamo.New(dynamo.Config{Client: noTx{}, Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	f := &txFixture{t: t}
	if err := s.CompleteTx(ctx, p, dynamo.Writes{f.add("x", 1)}); !errors.Is(err, claimstore.ErrTxUnsupported) {
		t.Errorf("client without transactions: CompleteTx = %v, want ErrTxUnsupported", err)
	}
}

// noTx is a client with the store's plain API and no transactions; it is
// never called.
type noTx struct{ dynamo.API }
