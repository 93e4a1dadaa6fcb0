package worker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
)

// names are writes for txStore: each names a row it appends.
type names []string

func (n names) Len() int { return len(n) }

// txStore is the memory store with transactional completion: the writes
// are applied only if the completion is, or the next error in fail is
// returned instead and nothing is applied.
type txStore struct {
	*memory.Store
	mu      sync.Mutex
	fail    []error
	applied []string
}

var _ claimstore.TxCompleter = (*txStore)(nil)

func (s *txStore) CompleteTx(ctx context.Context, p claimstore.CompleteParams, w claimstore.TxWrites) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.fail) > 0 {
		err := s.fail[0]
		s.fail = s.fail[1:]
		return err
	}
	if err := s.Complete(ctx, p); err != nil {
		return err
	}
	s.applied = append(s.applied, w.(names)...)
	return nil
}

func (s *txStore) rows() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.applied...)
}

func committing(tx Tx) Handler {
	return HandlerFunc(func(_ context.Context, m *Message) (string, error) {
		m.Commit(tx)
		return "applied", nil
	})
}

func TestCommitOutcomes(t *testing.T) {
	t.Parallel()
	refused := &claimstore.WriteConditionError{Index: 1, Err: errors.New("ConditionalCheckFailed")}
	cases := []struct {
		name    string
		tx      Tx
		fail    []error
		want    Action
		status  claimstore.Status
		result  string
		applied int
	}{
		{"committed with the completion", Tx{Writes: names{"entry", "balance"}}, nil, Ack, claimstore.StatusCompleted, "applied", 2},
		{"no writes is a plain completion", Tx{Writes: names{}}, nil, Ack, claimstore.StatusCompleted, "applied", 0},
		{"a write's condition retries by default", Tx{Writes: names{"entry"}}, []error{refused}, Retry, claimstore.StatusReleased, "", 0},
		{"a rejection the handler completes", Tx{Writes: names{"entry"}, Rejected: func(e *claimstore.WriteConditionError) (string, error) {
			return "rejected: write " + string(rune('0'+e.Index)), nil
		}}, []error{refused}, Ack, claimstore.StatusCompleted, "rejected: write 1", 0},
		{"a rejection the handler dead-letters", Tx{Writes: names{"entry"}, Rejected: func(*claimstore.WriteConditionError) (string, error) {
			return "", Permanentf("insufficient funds")
		}}, []error{refused}, DeadLetter, claimstore.StatusReleased, "", 0},
		{"a panicking Rejected is never acked", Tx{Writes: names{"entry"}, Rejected: func(*claimstore.WriteConditionError) (string, error) {
			panic("boom")
		}}, []error{refused}, Retry, claimstore.StatusReleased, "", 0},
		{"too large is dead-lettered, not half-committed", Tx{Writes: names{"entry"}}, []error{claimstore.ErrTxTooLarge}, DeadLetter, claimstore.StatusReleased, "", 0},
		{"lease lost at the transaction", Tx{Writes: names{"entry"}}, []error{claimstore.ErrLeaseLost}, Leave, claimstore.StatusInProgress, "", 0},
		{"a store error leaves the message", Tx{Writes: names{"entry"}}, []error{errors.New("throttled")}, Leave, claimstore.StatusInProgress, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(committing(tc.tx))
			s := &txStore{Store: f.store, fail: tc.fail}
			f.p.store = s
			d := f.p.process(context.Background(), &Message{ID: "m1", Body: "{}", Attempt: 1}, f.lease())
			if d.Action != tc.want {
				t.Fatalf("action = %v, want %v (Disposition %+v)", d.Action, tc.want, d)
			}
			c, err := f.store.Get(context.Background(), "m1")
			if err != nil || c.Status != tc.status || c.Result != tc.result {
				t.Errorf("claim = %s %q, %v; want %s %q", c.Status, c.Result, err, tc.status, tc.result)
			}
			if got := s.rows(); len(got) != tc.applied {
				t.Errorf("applied %v, want %d writes", got, tc.applied)
			}
		})
	}
}

// TestCommitUnsupported: a handler that commits writes through a store
// without transactions has its message dead-lettered with the reason, and
// its claim released, never completed without the writes.
func TestCommitUnsupported(t *testing.T) {
	t.Parallel()
	f := newFixture(committing(Tx{Writes: names{"entry"}}))
	d := f.p.process(context.Background(), &Message{ID: "m1", Body: "{}", Attempt: 1}, f.lease())
	if d.Action != DeadLetter || !strings.Contains(d.Reason, "not supported") {
		t.Fatalf("Disposition = %+v, want a dead-letter saying transactions are not supported", d)
	}
	if c, _ := f.store.Get(context.Background(), "m1"); c.Status != claimstore.StatusReleased {
		t.Errorf("claim status = %s, want RELEASED", c.Status)
	}
}

// TestCommitLeaseLostWhileHandling: a holder superseded while its handler
// ran commits nothing.
func TestCommitLeaseLostWhileHandling(t *testing.T) {
	t.Parallel()
	var f *fixture
	f = newFixture(HandlerFunc(func(_ context.Context, m *Message) (string, error) {
		if err := f.takeOver(m.Key); err != nil {
			t.Error(err)
		}
		m.Commit(Tx{Writes: names{"entry"}})
		return "applied", nil
	}))
	s := &txStore{Store: f.store}
	f.p.store = s
	d := f.p.process(context.Background(), &Message{ID: "m1", Body: "{}", Attempt: 1}, f.lease())
	if d.Action != Leave || f.metrics.Count(OutcomeLeaseLost) != 1 {
		t.Errorf("Disposition %+v, lease lost %d; want leave, counted once", d, f.metrics.Count(OutcomeLeaseLost))
	}
	if got := s.rows(); len(got) != 0 {
		t.Errorf("a superseded holder applied %v", got)
	}
}

// TestCommitDroppedOnFailedTry: writes committed by a handler call that
// failed are not committed by a later call that did not commit them.
func TestCommitDroppedOnFailedTry(t *testing.T) {
	t.Parallel()
	f := newFixture(HandlerFunc(func(_ context.Context, m *Message) (string, error) {
		if m.tx != nil {
			t.Error("the handler saw an earlier call's writes")
		}
		return "ok", nil
	}))
	m := &Message{ID: "m1"}
	m.Commit(Tx{Writes: names{"stale"}})
	if _, err := f.p.call(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if m.tx != nil {
		t.Error("an earlier call's writes survived a call that committed none")
	}
}
