package sim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/sim"
	"github.com/claimfirst/claimfirst/worker"
)

// store is a claim store that commits ledger writes too.
type store interface {
	claimstore.Store
	claimstore.TxCompleter
}

// checkThenWrite acquires by reading the row and then writing it without a
// condition: two deliveries that both read "free" both believe they hold it.
type checkThenWrite struct{ store }

func (s checkThenWrite) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	c, err := s.Get(ctx, p.Key)
	free := errors.Is(err, claimstore.ErrNotFound) || (err == nil && c.Takeable(time.Now()))
	if err != nil && !errors.Is(err, claimstore.ErrNotFound) {
		return claimstore.Acquisition{}, err
	}
	time.Sleep(20 * time.Millisecond) // the round trip between the read and the write
	a, err := s.store.Acquire(ctx, p)
	if err == nil && free && a.Outcome == claimstore.HeldElsewhere {
		// The unconditional write "wins": the caller believes it holds the claim.
		if p.Acq == "" {
			p.Acq = claimstore.NewAcq()
		}
		c := a.Claim
		c.Acq, c.LeaseUntil = p.Acq, p.LeaseUntil
		return claimstore.Acquisition{Outcome: claimstore.Acquired, Claim: c}, nil
	}
	return a, err
}

// noAcq drops the acq condition of the holder's writes: any write on an
// in-progress row applies, whoever holds it (the token stays the caller's).
type noAcq struct{ store }

func (s noAcq) holder(ctx context.Context, h claimstore.Holder) claimstore.Holder {
	if c, err := s.Get(ctx, h.Key); err == nil && c.Status == claimstore.StatusInProgress {
		h.Acq = c.Acq
	}
	return h
}

func (s noAcq) Renew(ctx context.Context, p claimstore.RenewParams) error {
	p.Holder = s.holder(ctx, p.Holder)
	return s.store.Renew(ctx, p)
}

func (s noAcq) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	return s.CompleteTx(ctx, p, nil)
}

func (s noAcq) CompleteTx(ctx context.Context, p claimstore.CompleteParams, w claimstore.TxWrites) error {
	p.Holder = s.holder(ctx, p.Holder)
	return claimstore.CompleteTx(ctx, s.store, p, w)
}

func (s noAcq) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	p.Holder = s.holder(ctx, p.Holder)
	return s.store.Release(ctx, p)
}

// noFence completes whatever holds the row: the completion is not
// conditioned on the caller's claim at all.
type noFence struct{ store }

func (s noFence) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	return s.CompleteTx(ctx, p, nil)
}

func (s noFence) CompleteTx(ctx context.Context, p claimstore.CompleteParams, w claimstore.TxWrites) error {
	if c, err := s.Get(ctx, p.Key); err == nil && c.Status == claimstore.StatusInProgress {
		p.Holder = c.Holder()
	}
	return claimstore.CompleteTx(ctx, s.store, p, w)
}

// noRelease never releases a claim on failure: it stays in progress until
// its lease runs out.
type noRelease struct{ store }

func (s noRelease) Release(context.Context, claimstore.ReleaseParams) error { return nil }

// noRenew answers every renewal with success and writes nothing.
type noRenew struct{ store }

func (s noRenew) Renew(context.Context, claimstore.RenewParams) error { return nil }

// tooLarge is a store as DynamoDB's was before results were checked: a
// result over the row's limit fails every completion with a validation
// error that is neither a lease loss nor a refusal.
type tooLarge struct{ store }

func (s tooLarge) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	return s.CompleteTx(ctx, p, nil)
}

func (s tooLarge) CompleteTx(ctx context.Context, p claimstore.CompleteParams, w claimstore.TxWrites) error {
	if len(p.Result) > 400_000 {
		return fmt.Errorf("ValidationException: Item size has exceeded the maximum allowed size")
	}
	return claimstore.CompleteTx(ctx, s.store, p, w)
}

// receiveCountSchedule hides a claim's own attempts from the worker, which
// then indexes a failed message's backoff by its ApproximateReceiveCount,
// as it did before the fix: in a FIFO group, the receives the messages
// behind a failing one spent while it blocked them are charged to their
// own first failure, and the group stalls.
type receiveCountSchedule struct{ store }

func (s receiveCountSchedule) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	a, err := s.store.Acquire(ctx, p)
	if err == nil && a.Outcome == claimstore.Acquired {
		a.Claim.Attempts = 1 << 30
	}
	return a, err
}

// noDate calls SQS without the caller's SDK options, so the answers' Date
// never reaches the worker's clock check.
type noDate struct{ api worker.SQSAPI }

func (n noDate) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return n.api.ReceiveMessage(ctx, in)
}

func (n noDate) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return n.api.DeleteMessageBatch(ctx, in)
}

func (n noDate) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return n.api.ChangeMessageVisibility(ctx, in)
}

func (n noDate) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return n.api.ChangeMessageVisibilityBatch(ctx, in)
}

func (n noDate) SendMessage(ctx context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return n.api.SendMessage(ctx, in)
}

func (n noDate) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return n.api.GetQueueAttributes(ctx, in)
}

func (n noDate) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, _ ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) { //nolint:revive // the SDK's name
	return n.api.GetQueueUrl(ctx, in)
}

func wrap(f func(store) claimstore.Store) func(claimstore.Store) claimstore.Store {
	return func(s claimstore.Store) claimstore.Store { return f(s.(store)) }
}

// mutants are the breaks the simulator must find, each within Within seeds
// (from seed 0); each is a wrapper around the real code, never a flag in it.
var mutants = []struct {
	name   string
	within int
	cfg    sim.Config
}{
	{"acquire checks then writes", 400, sim.Config{
		WrapStore: wrap(func(s store) claimstore.Store { return checkThenWrite{s} })}},
	{"store drops the acq condition", 600, sim.Config{
		WrapStore: wrap(func(s store) claimstore.Store { return noAcq{s} })}},
	{"completion without fencing", 600, sim.Config{
		WrapStore: wrap(func(s store) claimstore.Store { return noFence{s} })}},
	{"no lease renewal", 20, sim.Config{
		WrapStore: wrap(func(s store) claimstore.Store { return noRenew{s} })}},
	{"no release on failure", 20, sim.Config{Faults: sim.AllFaults &^ (sim.Crash | sim.Stall | sim.Drain | sim.Duplicate),
		WrapStore: wrap(func(s store) claimstore.Store { return noRelease{s} })}},
	{"default decoder keys by m.ID", 200, sim.Config{KeyByMessageID: true,
		Tune: func(_ int, c *worker.Config) {
			dec := c.Decoder
			c.Decoder = worker.DecoderFunc(func(m *worker.Message) error {
				err := dec.Decode(m)
				m.Key = m.ID // the redriven message's new id, not OriginalMessageId
				return err
			})
		}}},
	{"completion retries a too-large result", 20, sim.Config{
		WrapStore: wrap(func(s store) claimstore.Store { return tooLarge{s} }),
		Tune: func(_ int, c *worker.Config) {
			h := c.Handler
			c.Handler = worker.HandlerFunc(func(ctx context.Context, m *worker.Message) (string, error) {
				r, err := h.Handle(ctx, m)
				if err == nil && strings.HasSuffix(m.Key, "3") {
					r += strings.Repeat("x", 500_000)
				}
				return r, err
			})
		}}},
	{"FIFO backoff by receive count", 60, sim.Config{Queue: sim.FIFOQueue,
		WrapStore: wrap(func(s store) claimstore.Store { return receiveCountSchedule{s} })}},
	{"a worker's clock is ahead, unchecked", 300, sim.Config{
		Clock: func(slot int, skew time.Duration) func() time.Time {
			if slot == 1 {
				skew = 20 * time.Second // far past the 3s lease margin
			}
			return func() time.Time { return time.Now().Add(skew) }
		},
		// The worker before its clock check: it never sees SQS's Date.
		Tune: func(_ int, c *worker.Config) { c.SQS = noDate{c.SQS} }}},
}

// TestMutants checks that the simulator catches each mutant within its
// stated number of seeds, and logs how many it took.
func TestMutants(t *testing.T) {
	for _, m := range mutants {
		t.Run(strings.ReplaceAll(m.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			for s := range m.within {
				cfg := m.cfg
				cfg.Seed = uint64(s)
				var r *sim.Result
				ok := t.Run(fmt.Sprint(s), func(t *testing.T) {
					r = sim.Simulated(t, cfg)
				})
				_ = ok
				if r != nil && len(r.Violations) > 0 {
					t.Logf("%s: caught at seed %d (%d seeds): %s", m.name, s, s+1, r.Violations[0])
					return
				}
			}
			t.Errorf("%s: not caught within %d seeds", m.name, m.within)
		})
	}
}
