package sim

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// ErrCrashed is what every call of a crashed worker's clients answers:
// nothing a crashed worker does after its crash has an effect.
var ErrCrashed = errors.New("sim: worker crashed")

// node is one incarnation of a worker process: its clients pass through
// its gate, which refuses every call once it crashed and holds every call
// while it is stalled (a GC pause, SIGSTOP).
type node struct {
	slot, inc int
	name      string
	clock     func() time.Time
	// offBy is how far the clock is off beyond the worker's ClockSkewMax
	// (0: within it): such a worker must claim nothing.
	offBy time.Duration

	mu         sync.Mutex
	paused     bool // stalled at a completion already
	crashed    bool
	stallUntil time.Time
}

type nodeKey struct{}

func (n *node) crash() {
	n.mu.Lock()
	n.crashed = true
	n.mu.Unlock()
}

func (n *node) stall(until time.Time) {
	n.mu.Lock()
	n.stallUntil = until
	n.mu.Unlock()
}

// pauseOnce reports true the first time it is called.
func (n *node) pauseOnce() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	first := !n.paused
	n.paused = true
	return first
}

func (n *node) dead() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.crashed
}

// enter waits out a stall and refuses calls after a crash. A stalled
// process does not see its context either: the wait ignores it.
func (n *node) enter() error {
	for {
		n.mu.Lock()
		crashed, until := n.crashed, n.stallUntil
		n.mu.Unlock()
		if crashed {
			return ErrCrashed
		}
		d := time.Until(until)
		if d <= 0 {
			return nil
		}
		time.Sleep(d)
	}
}

// call runs f through the gate: refused after a crash, held during a
// stall, and its answer lost if the crash came while it ran.
func (n *node) call(f func() error) error {
	if err := n.enter(); err != nil {
		return err
	}
	err := f()
	if n.dead() {
		return ErrCrashed
	}
	return err
}

// Effect runs f, a handler's side effect, through the gate of the worker
// whose handler ctx belongs to: after that worker crashed f is not run and
// Effect returns ErrCrashed; while it is stalled Effect waits. Outside a
// simulated worker it just calls f.
func Effect(ctx context.Context, f func() error) error {
	n, ok := ctx.Value(nodeKey{}).(*node)
	if !ok {
		return f()
	}
	return n.call(f)
}

// gatedSQS is a worker's SQS client: the world's SQS behind the worker's gate.
type gatedSQS struct {
	n   *node
	api *SQS
}

var _ sqsworker.SQSAPI = gatedSQS{}

func gated[I, O any](n *node, f func(context.Context, I, ...func(*sqs.Options)) (O, error), ctx context.Context, in I, opts ...func(*sqs.Options)) (O, error) {
	var out O
	err := n.call(func() error {
		var err error
		out, err = f(ctx, in, opts...)
		return err
	})
	if err != nil {
		var zero O
		return zero, err
	}
	return out, nil
}

func (g gatedSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return gated(g.n, g.api.ReceiveMessage, ctx, in, opts...)
}

func (g gatedSQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return gated(g.n, g.api.DeleteMessageBatch, ctx, in, opts...)
}

func (g gatedSQS) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return gated(g.n, g.api.ChangeMessageVisibility, ctx, in, opts...)
}

func (g gatedSQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return gated(g.n, g.api.ChangeMessageVisibilityBatch, ctx, in, opts...)
}

func (g gatedSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return gated(g.n, g.api.SendMessage, ctx, in, opts...)
}

func (g gatedSQS) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return gated(g.n, g.api.GetQueueAttributes, ctx, in, opts...)
}

func (g gatedSQS) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) { //nolint:revive // the SDK's name
	return gated(g.n, g.api.GetQueueUrl, ctx, in, opts...)
}

func (n *node) isCrashed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.crashed
}
