package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/once"
	"github.com/claimfirst/claimfirst/sim"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
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
type noDate struct{ api sqsworker.SQSAPI }

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

// expiryIsLoss is the worker as it was when a lease that ran out on its own
// clock counted as lost: once a renewal of a holder failed with a store
// error and the holder's lease has run out, its completion and its release
// answer ErrLeaseLost and write nothing, so the worker leaves the message
// (neither completed nor acked) and the redelivery runs the effect again.
type expiryIsLoss struct {
	store
	mu     sync.Mutex
	until  map[string]time.Time // acq -> the lease's end as last stored
	failed map[string]bool      // acq -> a renewal failed with a store error
}

func newExpiryIsLoss(s store) *expiryIsLoss {
	return &expiryIsLoss{store: s, until: map[string]time.Time{}, failed: map[string]bool{}}
}

func (s *expiryIsLoss) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	a, err := s.store.Acquire(ctx, p)
	if err == nil && a.Outcome == claimstore.Acquired {
		s.mu.Lock()
		s.until[a.Claim.Acq] = a.Claim.LeaseUntil
		s.mu.Unlock()
	}
	return a, err
}

func (s *expiryIsLoss) Renew(ctx context.Context, p claimstore.RenewParams) error {
	err := s.store.Renew(ctx, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		s.until[p.Acq] = p.LeaseUntil
	case !errors.Is(err, claimstore.ErrLeaseLost):
		s.failed[p.Acq] = true
	}
	return err
}

// lost reports that h's renewal failed and its lease ran out.
func (s *expiryIsLoss) lost(h claimstore.Holder) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed[h.Acq] && !time.Now().Before(s.until[h.Acq])
}

func (s *expiryIsLoss) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	return s.CompleteTx(ctx, p, nil)
}

func (s *expiryIsLoss) CompleteTx(ctx context.Context, p claimstore.CompleteParams, w claimstore.TxWrites) error {
	if s.lost(p.Holder) {
		return fmt.Errorf("complete %q: %w", p.Key, claimstore.ErrLeaseLost)
	}
	return claimstore.CompleteTx(ctx, s.store, p, w)
}

func (s *expiryIsLoss) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	if s.lost(p.Holder) {
		return fmt.Errorf("release %q: %w", p.Key, claimstore.ErrLeaseLost)
	}
	return s.store.Release(ctx, p)
}

// handlersEnded records the deliveries (key and token) whose handler's
// context has ended.
type handlersEnded struct {
	mu    sync.Mutex
	ended map[string]bool
}

func (e *handlersEnded) id(key string, token int64) string { return fmt.Sprint(key, "\x00", token) }

// watch wraps h: a delivery's context ending (shutdown cancels it) is noted.
func (e *handlersEnded) watch(h worker.Handler) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, m *worker.Message) (string, error) {
		id := e.id(m.Key, m.Token)
		stop := context.AfterFunc(ctx, func() {
			e.mu.Lock()
			e.ended[id] = true
			e.mu.Unlock()
		})
		defer stop()
		return h.Handle(ctx, m)
	})
}

// renewalsEnd is the worker as it was when the lease's heartbeat shared
// the handlers' context: once a handler's context ended (a shutdown
// cancelled it), its renewals stop (every Renew says the lease is lost and
// writes nothing), though the handler, ignoring its context, runs on.
type renewalsEnd struct {
	store
	e *handlersEnded
}

func (s renewalsEnd) Renew(ctx context.Context, p claimstore.RenewParams) error {
	s.e.mu.Lock()
	ended := s.e.ended[s.e.id(p.Key, p.Token)]
	s.e.mu.Unlock()
	if ended {
		return fmt.Errorf("renew %q: %w", p.Key, claimstore.ErrLeaseLost)
	}
	return s.store.Renew(ctx, p)
}

// mailing is a workload whose effect honours no key: an email per order,
// sent at the start of its handler, which then works on for 5 to 120
// seconds. Under faults that never throw a handler's success away (no
// crash, stall, store error or Lambda deadline: those send an email twice,
// see ExampleSimulate) each order's email goes out once. A handler that
// ignoresContext works on after its context ended (abandoned at shutdown);
// otherwise it returns its success when its context ends (the lease ran
// out on its clock). ended counts the handlers whose context ended before
// their work did, by the context's cause: "expired" (the lease ran out on
// the worker's clock) or "abandoned" (shutdown).
func mailing(faults sim.Fault, ignoresContext bool, ended func(cause string)) sim.Config {
	e := &emails{sent: map[string]int{}}
	return sim.Config{
		Faults: faults, Queue: sim.Standard, Deploy: sim.Containers, Messages: 12,
		Body: func(i int) (string, string) { return fmt.Sprintf("order-%d", i), "" },
		Decoder: worker.DecoderFunc(func(m *worker.Message) error {
			if !strings.HasPrefix(m.Body, "order-") {
				return fmt.Errorf("not an order: %q", m.Body)
			}
			m.Key = m.Body
			return nil
		}),
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) (string, error) {
			if err := sim.Effect(ctx, func() error { e.send(m.Key); return nil }); err != nil {
				return "", err
			}
			n, _ := strconv.Atoi(strings.TrimPrefix(m.Key, "order-"))
			work := time.NewTimer(time.Duration(5+(n*37)%116) * time.Second)
			defer work.Stop()
			select {
			case <-work.C:
				return "sent", nil
			case <-ctx.Done():
			}
			cause := "abandoned"
			if errors.Is(context.Cause(ctx), once.ErrLeaseExpired) {
				cause = "expired"
			}
			if ended != nil {
				ended(cause)
			}
			if ignoresContext {
				<-work.C
			}
			return "sent", nil
		}),
		Check: func(*sim.Result) []string {
			e.mu.Lock()
			defer e.mu.Unlock()
			var bad []string
			for i := range 12 {
				order := fmt.Sprintf("order-%d", i)
				if n := e.sent[order]; n != 1 {
					bad = append(bad, fmt.Sprintf("%s: %d emails", order, n))
				}
			}
			return bad
		},
	}
}

// unencodableIsPermanent is the worker as it was when a typed result that
// did not encode made the handler's success a permanent failure: the claim
// of an effect already done is released and the message dead-lettered.
func unencodableIsPermanent(_ int, c *sqsworker.Config) {
	h := c.Handler
	c.Handler = worker.HandlerFunc(func(ctx context.Context, m *worker.Message) (string, error) {
		r, err := h.Handle(ctx, m)
		var ee *once.EncodeError
		if errors.As(err, &ee) {
			return "", worker.Permanent("result does not encode", err)
		}
		return r, err
	})
}

// keyByDelivery is the default decoder as it was before it read the
// envelope: a message is keyed by its own SQS id, so two deliveries of one
// SNS publication are two keys.
func keyByDelivery(_ int, c *sqsworker.Config) {
	dec := c.Decoder
	c.Decoder = worker.DecoderFunc(func(m *worker.Message) error {
		err := dec.Decode(m)
		m.Key, m.Fingerprint = m.OriginalID(), ""
		return err
	})
}

// keyByFloat is the key expression as it was when payloads were decoded
// into float64: an order number is keyed by its float64's text, and above
// 2^53 neighbouring orders share a key (the second is acked as a duplicate).
func keyByFloat(_ int, c *sqsworker.Config) {
	dec := c.Decoder
	c.Decoder = worker.DecoderFunc(func(m *worker.Message) error {
		if err := dec.Decode(m); err != nil {
			return err
		}
		var v struct {
			Order float64 `json:"order"`
		}
		if json.Unmarshal([]byte(m.Body), &v) == nil {
			m.Key = strconv.FormatFloat(v.Order, 'f', -1, 64)
		}
		return nil
	})
}

func wrap(f func(store) claimstore.Store) func(claimstore.Store) claimstore.Store {
	return func(s claimstore.Store) claimstore.Store { return f(s.(store)) }
}

// mutants are the breaks the simulator must find, each within Within seeds
// (from seed 0); each is a wrapper around the real code, never a flag in it.
// cfg makes a run's configuration afresh for each seed (some mutants and
// workloads keep state for the run).
var mutants = []struct {
	name   string
	within int
	cfg    func() sim.Config
}{
	{"acquire checks then writes", 400, func() sim.Config {
		return sim.Config{WrapStore: wrap(func(s store) claimstore.Store { return checkThenWrite{s} })}
	}},
	{"store drops the acq condition", 600, func() sim.Config {
		return sim.Config{WrapStore: wrap(func(s store) claimstore.Store { return noAcq{s} })}
	}},
	{"completion without fencing", 600, func() sim.Config {
		return sim.Config{WrapStore: wrap(func(s store) claimstore.Store { return noFence{s} })}
	}},
	{"no lease renewal", 20, func() sim.Config {
		return sim.Config{WrapStore: wrap(func(s store) claimstore.Store { return noRenew{s} })}
	}},
	{"no release on failure", 20, func() sim.Config {
		return sim.Config{Faults: sim.AllFaults &^ (sim.Crash | sim.Stall | sim.Drain | sim.Duplicate),
			WrapStore: wrap(func(s store) claimstore.Store { return noRelease{s} })}
	}},
	{"default decoder keys by m.ID", 200, func() sim.Config {
		return sim.Config{KeyByMessageID: true,
			Tune: func(_ int, c *sqsworker.Config) {
				dec := c.Decoder
				c.Decoder = worker.DecoderFunc(func(m *worker.Message) error {
					err := dec.Decode(m)
					m.Key = m.ID // the redriven message's new id, not OriginalMessageId
					return err
				})
			}}
	}},
	{"completion retries a too-large result", 20, func() sim.Config {
		return sim.Config{
			WrapStore: wrap(func(s store) claimstore.Store { return tooLarge{s} }),
			Tune: func(_ int, c *sqsworker.Config) {
				h := c.Handler
				c.Handler = worker.HandlerFunc(func(ctx context.Context, m *worker.Message) (string, error) {
					r, err := h.Handle(ctx, m)
					if err == nil && strings.HasSuffix(m.Key, "3") {
						r += strings.Repeat("x", 500_000)
					}
					return r, err
				})
			}}
	}},
	{"FIFO backoff by receive count", 60, func() sim.Config {
		return sim.Config{Queue: sim.FIFOQueue,
			WrapStore: wrap(func(s store) claimstore.Store { return receiveCountSchedule{s} })}
	}},
	{"a worker's clock is ahead, unchecked", 300, func() sim.Config {
		return sim.Config{
			Clock: func(slot int, skew time.Duration) func() time.Time {
				if slot == 1 {
					skew = 20 * time.Second // far past the 3s lease margin
				}
				return func() time.Time { return time.Now().Add(skew) }
			},
			// The worker before its clock check: it never sees SQS's Date.
			Tune: func(_ int, c *sqsworker.Config) { c.SQS = noDate{c.SQS} }}
	}},
	{"a lease run out on the worker's clock is lost", 20, func() sim.Config {
		cfg := mailing(sim.RenewalBlip, false, nil)
		cfg.WrapStore = wrap(func(s store) claimstore.Store { return newExpiryIsLoss(s) })
		return cfg
	}},
	{"renewals end with the handler's context", 100, func() sim.Config {
		e := &handlersEnded{ended: map[string]bool{}}
		cfg := mailing(sim.Drain, true, nil)
		cfg.WrapStore = wrap(func(s store) claimstore.Store { return renewalsEnd{s, e} })
		cfg.Tune = func(_ int, c *sqsworker.Config) { c.Handler = e.watch(c.Handler) }
		return cfg
	}},
	{"a result that does not encode is a permanent failure", 20, func() sim.Config {
		return sim.Config{Tune: unencodableIsPermanent}
	}},
	{"an SNS publication keyed by each delivery's id", 40, func() sim.Config {
		return sim.Config{KeyByMessageID: true, SNS: true, Queue: sim.Standard, Tune: keyByDelivery}
	}},
	{"an order number keyed as a float64", 20, func() sim.Config {
		return sim.Config{KeyByNumber: true, Tune: keyByFloat}
	}},
}

// TestMutants checks that the simulator catches each mutant within its
// stated number of seeds, and logs how many it took.
func TestMutants(t *testing.T) {
	for _, m := range mutants {
		t.Run(strings.ReplaceAll(m.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			for s := range m.within {
				cfg := m.cfg()
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

// TestMailing runs the workloads of the mutants that need one of their own
// on the real code: each order's email goes out once, under renewal blips
// that run leases out on the workers' clocks, and under drains that
// abandon handlers which run on in the process. It checks that the faults
// reached running handlers, so the workloads can find what they are for.
func TestMailing(t *testing.T) {
	for _, tc := range []struct {
		name           string
		faults         sim.Fault
		ignoresContext bool
		cause          string
	}{
		{"renewal blip", sim.RenewalBlip, false, "expired"},
		{"abandoned at shutdown", sim.Drain, true, "abandoned"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			ended := map[string]int{}
			n := *seeds // -sim.seeds, as TestSeeds
			for s := range uint64(n) {
				cfg := mailing(tc.faults, tc.ignoresContext, func(cause string) {
					mu.Lock()
					ended[cause]++
					mu.Unlock()
				})
				cfg.Seed = s
				cfg.Rerun = fmt.Sprintf("(seed %d of TestMailing/%s)", s, tc.name)
				sim.Run(t, cfg)
			}
			if ended[tc.cause] == 0 {
				t.Errorf("in %d seeds no handler's context ended %s: the fault never reached a running handler", n, tc.cause)
			}
			t.Logf("%d seeds: handlers whose context ended before their work: %v", n, ended)
		})
	}
}
