package demo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/claimfirst/claimfirst/provider"
)

const (
	// visibilityTimeout is how long a received message stays invisible; a
	// message that is not acked comes back after it (SQS's default).
	visibilityTimeout = 30 * time.Second
	// leaseMargin is how much sooner than the visibility timeout a lease
	// ends, so that the redelivery finds it expired.
	leaseMargin = 2 * time.Second
	// maxReceives is the queue's maxReceiveCount: a message received this
	// many times without an ack goes to the dead-letter queue.
	maxReceives = 5
	// retention is how long a claim is remembered; longer than SQS's default
	// message retention of four days.
	retention = 7 * 24 * time.Hour
)

// message is one copy of a payment message as the broker delivers it.
type message struct {
	payment provider.Payment
	// receives counts the receives of this copy so far, this one included.
	receives int
	// echo makes the broker deliver a second copy of the message to another
	// worker as soon as this one is received, so that the copy arrives while
	// the first is still being handled (a producer retry, or a visibility
	// timeout that ran out under a slow handler).
	echo bool
	// shipment and entry are the payloads of experiments 5 and 7, whose
	// messages are not payments; payment is zero there.
	shipment shipment
	entry    ledgerEntry
}

// id names the message's unit in errors.
func (m message) id() string {
	switch {
	case m.shipment.OrderID != "":
		return m.shipment.OrderID
	case m.entry.EntryID != "":
		return m.entry.EntryID
	default:
		return m.payment.PaymentID
	}
}

// verdict is what a handler tells the broker about a message.
type verdict int

const (
	// ack deletes the message: it was handled, or it is a duplicate.
	ack verdict = iota + 1
	// later leaves the message unacked: it comes back after the visibility
	// timeout (a failure, a claim held elsewhere, or a worker that died).
	later
)

// handler handles one received message. An error is not a verdict: it stops
// the experiment, whose numbers would no longer mean anything.
type handler func(ctx context.Context, m message) (verdict, error)

// brokerStats are the broker's counts for one row.
type brokerStats struct {
	// Copies is the number of distinct copies delivered: every payment once,
	// plus one per echo.
	Copies int
	// Receives counts every handler call, redeliveries included.
	Receives int
	// DeadLettered counts copies received maxReceives times without an ack.
	DeadLettered int
	// dead holds the dead-lettered copies, as a redrive would send them
	// back: received afresh.
	dead []message
}

// broker is an in-process at-least-once queue with a fixed pool of workers.
// It delivers in rounds: the first round receives every message once (and
// every echo at once); each later round happens one visibility timeout later
// on the store's clock and receives the messages that were not acked.
type broker struct {
	workers  int
	clock    *clock
	progress *progress
}

// run delivers msgs to h until every copy is acked or dead-lettered.
func (b *broker) run(ctx context.Context, msgs []message, h handler) (brokerStats, error) {
	var st brokerStats
	st.Copies = len(msgs)
	pending := msgs
	for round := 0; len(pending) > 0; round++ {
		if round > 0 {
			b.clock.Advance(visibilityTimeout)
		}
		back, echoes, receives, err := b.round(ctx, pending, h)
		st.Copies += echoes
		st.Receives += receives
		if err != nil {
			return st, err
		}
		pending = pending[:0:0]
		for _, m := range back {
			if m.receives >= maxReceives {
				st.DeadLettered++
				m.receives, m.echo = 1, false
				st.dead = append(st.dead, m)
				continue
			}
			m.receives++
			m.echo = false
			pending = append(pending, m)
		}
	}
	return st, nil
}

// round receives every message of msgs once on b.workers goroutines and
// returns the ones that were not acked. An echo's copy is queued ahead of
// the remaining messages, so the next free worker takes it while the first
// copy is still being handled.
func (b *broker) round(ctx context.Context, msgs []message, h handler) (back []message, echoes, receives int, err error) {
	g, ctx := errgroup.WithContext(ctx)
	feed := make(chan message)
	copies := make(chan message, len(msgs))
	var (
		mu     sync.Mutex
		nEcho  atomic.Int64
		nRecvd atomic.Int64
	)
	g.Go(func() error {
		defer close(feed)
		for _, m := range msgs {
			select {
			case feed <- m:
			case <-ctx.Done():
				return nil
			}
		}
		return nil
	})
	handle := func(m message) error {
		if m.echo {
			c := m
			c.echo = false
			copies <- c // cannot block: at most one copy per message
			nEcho.Add(1)
		}
		v, err := h(ctx, m)
		nRecvd.Add(1)
		b.progress.receive()
		if err != nil {
			return fmt.Errorf("%s: %w", m.id(), err)
		}
		if v == later {
			mu.Lock()
			back = append(back, m)
			mu.Unlock()
		}
		return nil
	}
	for range b.workers {
		g.Go(func() error {
			in := feed
			for {
				select { // copies first
				case m := <-copies:
					if err := handle(m); err != nil {
						return err
					}
					continue
				default:
				}
				if in == nil {
					// Every copy is queued by a worker that is handling its
					// first, and who comes back here afterwards: none is lost.
					return nil
				}
				select {
				case m := <-copies:
					if err := handle(m); err != nil {
						return err
					}
				case m, ok := <-in:
					if !ok {
						in = nil
						continue
					}
					if err := handle(m); err != nil {
						return err
					}
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		})
	}
	err = g.Wait()
	return back, int(nEcho.Load()), int(nRecvd.Load()), err
}

// clock is a claim store's clock: real time plus an offset that the broker
// moves forward by a visibility timeout between rounds, so that leases expire
// without sleeping.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now returns the clock's time.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Advance moves the clock forward by d.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// payments returns n payments with ids pay_00001... and amounts from seed.
func payments(n int, seed int64) []provider.Payment {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	ps := make([]provider.Payment, n)
	for i := range ps {
		ps[i] = provider.Payment{
			PaymentID: fmt.Sprintf("pay_%05d", i+1),
			Amount:    100 + rng.Int64N(99_900),
			Currency:  "EUR",
		}
	}
	return ps
}

// choose returns exactly n/every payment ids of ps, chosen by seed; salt
// makes each experiment choose differently.
func choose(ps []provider.Payment, every int, seed int64, salt uint64) map[string]bool {
	return chooseIDs(paymentIDs(ps), every, seed, salt)
}

// paymentIDs returns the ids of ps.
func paymentIDs(ps []provider.Payment) []string {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.PaymentID
	}
	return ids
}

// messages wraps each payment in a message received for the first time.
func messages(ps []provider.Payment, echo map[string]bool) []message {
	ms := make([]message, len(ps))
	for i, p := range ps {
		ms[i] = message{payment: p, receives: 1, echo: echo[p.PaymentID]}
	}
	return ms
}
