package ledger

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/worker"
)

func TestDecodeEntry(t *testing.T) {
	t.Parallel()
	good := Entry{EntryID: "e1", Account: "acct_1", Amount: -250}
	cases := []struct {
		body string
		want Entry
		err  string
	}{
		{`{"entry_id":"e1","account":"acct_1","amount":-250}`, good, ""},
		{` {"amount":-250, "account":"acct_1", "entry_id":"e1"} `, good, ""},
		{`{"entry_id":"e1","account":"acct_1","amount":0}`, Entry{}, "amount must not be 0"},
		{`{"entry_id":"e1","account":"acct_1","amount":2.5}`, Entry{}, "integer"},
		{`{"entry_id":"e1","account":"acct_1","amount":"250"}`, Entry{}, "integer"},
		{`{"entry_id":"e1","account":"acct_1","amount":1e3}`, Entry{}, "integer"},
		{`{"entry_id":"e1","account":"acct_1","amount":99999999999999999999}`, Entry{}, "integer"},
		{`{"entry_id":1,"account":"acct_1","amount":250}`, Entry{}, "entry_id must be a string"},
		{`{"entry_id":"","account":"acct_1","amount":250}`, Entry{}, "entry_id must be 1 to 255 bytes"},
		{`{"entry_id":"` + strings.Repeat("x", 256) + `","account":"a","amount":250}`, Entry{}, "entry_id must be 1 to 255 bytes"},
		{`{"entry_id":"e1","amount":250}`, Entry{}, "account is missing"},
		{`{"entry_id":"e1","account":"a","amount":250,"memo":"x"}`, Entry{}, "unknown field"},
		{`{"entry_id":"e1","entry_id":"e2","account":"a","amount":250}`, Entry{}, "duplicate field"},
		{`{"entry_id":"e1","account":"a","amount":250} {}`, Entry{}, "trailing data"},
		{`[1]`, Entry{}, "not a JSON object"},
		{`{"entry_id":"e1","account":"a","amount":250`, Entry{}, "ledger:"},
	}
	for _, tc := range cases {
		got, err := DecodeEntry([]byte(tc.body))
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("DecodeEntry(%.60s) = %+v, %v; want %+v", tc.body, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("DecodeEntry(%.60s) = %+v, %v; want an error saying %q", tc.body, got, err, tc.err)
		}
	}
}

func FuzzDecodeEntry(f *testing.F) {
	for _, s := range []string{`{"entry_id":"e1","account":"a","amount":-1}`, `{"amount":1}`, `{}`, `[]`, `{"entry_id":"e","entry_id":"e"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEntry(data)
		if err != nil {
			return
		}
		if verr := e.Validate(); verr != nil {
			t.Fatalf("DecodeEntry(%q) accepted an invalid entry %+v: %v", data, e, verr)
		}
	})
}

func TestDecoder(t *testing.T) {
	t.Parallel()
	m := &worker.Message{ID: "m1", Body: `{"entry_id":"e1","account":"a","amount":5}`}
	if err := (Decoder{}).Decode(m); err != nil {
		t.Fatal(err)
	}
	other := &worker.Message{ID: "m2", Body: `{"entry_id":"e1","account":"a","amount":6}`}
	if err := (Decoder{}).Decode(other); err != nil {
		t.Fatal(err)
	}
	if m.Key != "e1" || m.Fingerprint == "" || m.Fingerprint == other.Fingerprint {
		t.Errorf("key %q, fingerprints %q and %q: want the entry id, and fingerprints that tell amounts apart", m.Key, m.Fingerprint, other.Fingerprint)
	}
	bad := &worker.Message{ID: "m3", Body: `{"entry_id":"e1"}`}
	if err := (Decoder{}).Decode(bad); !worker.IsPermanent(err) {
		t.Errorf("Decode(invalid) = %v, want a permanent error", err)
	}
}

// ledgerEnv is a claim store and a ledger table on the emulator.
type ledgerEnv struct {
	t     *testing.T
	ddb   *dynamodb.Client
	store *dynamo.Store
	h     Handler
}

func newLedgerEnv(t *testing.T) *ledgerEnv {
	t.Helper()
	cfg := awstest.Config(t)
	ddb := dynamodb.NewFromConfig(cfg)
	ctx := context.Background()
	claims, book := awstest.Name("claims"), awstest.Name("ledger")
	if err := dynamo.CreateTable(ctx, ddb, dynamo.TableSpec{Name: claims}); err != nil {
		t.Fatal(err)
	}
	if err := CreateTable(ctx, ddb, book); err != nil {
		t.Fatal(err)
	}
	s, err := dynamo.New(dynamo.Config{Client: ddb, Table: claims})
	if err != nil {
		t.Fatal(err)
	}
	return &ledgerEnv{t: t, ddb: ddb, store: s, h: Handler{Table: book}}
}

// apply claims key and completes it with e's writes.
func (le *ledgerEnv) apply(key string, e Entry) (claimstore.Holder, error) {
	le.t.Helper()
	ctx := context.Background()
	now := time.Now()
	a, err := le.store.Acquire(ctx, claimstore.AcquireParams{Key: key, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil || a.Outcome != claimstore.Acquired {
		le.t.Fatalf("Acquire(%s) = %v, %v", key, a.Outcome, err)
	}
	h := a.Claim.Holder()
	return h, le.store.CompleteTx(ctx, claimstore.CompleteParams{Holder: h, Result: ResultApplied, ExpiresAt: now.Add(time.Hour)}, le.h.Writes(e, h.Token))
}

func (le *ledgerEnv) account(name string) Account {
	le.t.Helper()
	a, err := ReadAccount(context.Background(), le.ddb, le.h.Table, name)
	if err != nil {
		le.t.Fatal(err)
	}
	return a
}

// TestEntryAppliedOnce: an entry moves its balance once, and the same entry
// under another claim (its first claim forgotten) is recognized by its row:
// already applied if it is the same entry, dead-lettered if the id was
// reused for another amount; the balance does not move again.
func TestEntryAppliedOnce(t *testing.T) {
	t.Parallel()
	le := newLedgerEnv(t)
	acct := awstest.Name("acct")
	e := Entry{EntryID: awstest.Name("e"), Account: acct, Amount: 700}
	if _, err := le.apply(e.EntryID, e); err != nil {
		t.Fatal(err)
	}
	if _, err := le.apply(awstest.Name("e"), Entry{EntryID: awstest.Name("e"), Account: acct, Amount: -200}); err != nil {
		t.Fatal(err)
	}
	if got := le.account(acct); got != (Account{Balance: 500, Entries: 2}) {
		t.Fatalf("account = %+v, want balance 500 from 2 entries", got)
	}

	for _, tc := range []struct {
		name   string
		e      Entry
		result string
	}{
		{"same entry", e, ResultAlreadyApplied},
		{"id reused", Entry{EntryID: e.EntryID, Account: acct, Amount: 701}, ""},
	} {
		_, err := le.apply(awstest.Name("forgotten"), tc.e)
		var wce *claimstore.WriteConditionError
		if !errors.As(err, &wce) || wce.Index != 0 {
			t.Fatalf("%s: CompleteTx = %v, want the entry's condition (write 0) to fail", tc.name, err)
		}
		result, herr := le.h.rejected(tc.e)(wce)
		switch {
		case tc.result != "" && (herr != nil || result != tc.result):
			t.Errorf("%s: rejected = %q, %v; want %q", tc.name, result, herr, tc.result)
		case tc.result == "" && !worker.IsPermanent(herr):
			t.Errorf("%s: rejected = %q, %v; want a permanent error", tc.name, result, herr)
		}
	}
	if got := le.account(acct); got != (Account{Balance: 500, Entries: 2}) {
		t.Errorf("account = %+v after the repeats, want balance 500 from 2 entries", got)
	}
}

// TestHandlerCommits: the handler writes nothing itself; it commits the
// entry's writes for the completion and needs the decoder's payload.
func TestHandlerCommits(t *testing.T) {
	t.Parallel()
	h := Handler{Table: "book"}
	m := &worker.Message{ID: "m1", Body: `{"entry_id":"e1","account":"a","amount":5}`, Token: 3}
	if err := (Decoder{}).Decode(m); err != nil {
		t.Fatal(err)
	}
	if r, err := h.Handle(context.Background(), m); err != nil || r != ResultApplied {
		t.Errorf("Handle = %q, %v; want %q", r, err, ResultApplied)
	}
	if _, err := h.Handle(context.Background(), &worker.Message{Payload: "not an entry"}); !worker.IsPermanent(err) {
		t.Errorf("Handle(undecoded) = %v, want a permanent error", err)
	}
	w := h.Writes(Entry{EntryID: "e1", Account: "a", Amount: 5}, 3)
	if w.Len() != 2 || w[0].Put == nil || w[1].Update == nil {
		t.Errorf("writes = %+v, want the entry's Put and the balance's Update", w)
	}
}
