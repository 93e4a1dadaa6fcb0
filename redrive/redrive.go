package redrive

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/claimfirst/claimfirst/origin"
)

// The message attributes the worker adds when it dead-letters a message.
// They repeat the worker package's constants, which this package does not
// import: it depends on SQS only.
const (
	// ReasonAttribute is the worker's dead-letter reason, dropped by Move.
	ReasonAttribute = "DeadLetterReason"
	// OriginalIDAttribute is the id the message first arrived with, signed
	// (see package origin), kept by Move.
	OriginalIDAttribute = "OriginalMessageId"
	// FirstReceivedAttribute is when the message was first received,
	// covered by OriginalIDAttribute's MAC.
	FirstReceivedAttribute = "FirstReceivedAt"
)

// NoReason is the reason Count reports for messages without a
// DeadLetterReason: SQS moved them itself after maxReceiveCount receives.
const NoReason = "(none: moved by SQS after maxReceiveCount receives)"

// API is the part of *sqs.Client the package uses.
type API interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	StartMessageMoveTask(ctx context.Context, in *sqs.StartMessageMoveTaskInput, opts ...func(*sqs.Options)) (*sqs.StartMessageMoveTaskOutput, error)
	ListMessageMoveTasks(ctx context.Context, in *sqs.ListMessageMoveTasksInput, opts ...func(*sqs.Options)) (*sqs.ListMessageMoveTasksOutput, error)
}

// Options tune Count and Move.
type Options struct {
	// Max is the most messages to count or move. Defaults to 0: all.
	Max int
	// Visibility is how long a received message stays hidden while it is
	// moved or counted: after a crash, it is visible again this long later.
	// Defaults to 60s.
	Visibility time.Duration
	// Progress, if set, is called after each batch with the number of
	// messages done so far. Defaults to nil.
	Progress func(done int)
	// Reasons, if set, selects the messages Move moves: those whose
	// DeadLetterReason contains one of these (NoReason matches the messages
	// without one). The rest stay in the dead-letter queue. Defaults to
	// nil: every reason.
	Reasons []string
	// ExcludeReasons leaves in the dead-letter queue the messages whose
	// DeadLetterReason contains one of these, such as those that must be
	// reconciled rather than retried. Defaults to nil.
	ExcludeReasons []string
	// Depth, if positive, stops Move once it has received this many
	// distinct messages: the dead-letter queue's depth when it started, so
	// that messages dead-lettered while it runs wait for the next run.
	// Defaults to 0: until the queue reads empty.
	Depth int
	// SourceARN, if set, is the ARN of the queue Move moves to: a message
	// SQS dead-lettered from another queue (its DeadLetterQueueSourceArn
	// names that queue) is left in the dead-letter queue, counted in
	// Result.Foreign, so that a queue naming this dead-letter queue in its
	// own redrive policy cannot have its messages moved into the source
	// queue. Messages without DeadLetterQueueSourceArn were sent to the
	// dead-letter queue directly (the worker dead-letters that way), by a
	// principal allowed to send to it. Defaults to "": every message.
	SourceARN string
	// Secret is the worker's OriginalIDSecret. A message sent to the
	// dead-letter queue directly (no DeadLetterQueueSourceArn: the worker
	// dead-letters that way, but so could anyone allowed to send to it) is
	// moved only when its OriginalIDAttribute verifies with it; one whose
	// attribute does not verify (forged, or signed with another secret) is
	// left, counted in Result.Unverified. A message SQS dead-lettered from
	// the source queue gets its id there, signed. Defaults to "": nothing
	// verifies, and every message is unkeyed or unverified.
	Secret origin.Secret
	// MoveUnkeyed moves the messages Move would leave as unkeyed
	// (Result.Unkeyed): those without an OriginalIDAttribute that verifies
	// and without room (or a Secret) for Move to give them one. Their
	// moved copy gets a new id, so a key taken from the message id
	// changes and the work can run again; and one sent to the dead-letter
	// queue directly cannot be told from a stranger's. Safe only when the
	// consumer keys by the payload (the payment binary's payment_id) and
	// only the worker may send to the dead-letter queue. Defaults to false.
	MoveUnkeyed bool
	// MaxBatchBytes bounds the size of one send (bodies and message
	// attributes): a batch over SQS's limit fails whole. Defaults to
	// 256 KiB, within every SQS limit; a larger message is sent alone.
	MaxBatchBytes int
}

// Selects reports whether a message with DeadLetterReason reason is to be
// moved under o's Reasons and ExcludeReasons (NoReason for none): the rule
// of Move, for a redrive of another broker's dead letters.
func (o Options) Selects(reason string) bool { return o.selects(reason) }

// selects reports whether a message with DeadLetterReason reason is to be moved.
func (o Options) selects(reason string) bool {
	for _, x := range o.ExcludeReasons {
		if strings.Contains(reason, x) {
			return false
		}
	}
	if len(o.Reasons) == 0 {
		return true
	}
	for _, r := range o.Reasons {
		if strings.Contains(reason, r) {
			return true
		}
	}
	return false
}

func (o Options) maxBatchBytes() int {
	if o.MaxBatchBytes <= 0 {
		return 256 << 10
	}
	return o.MaxBatchBytes
}

func (o Options) visibility() int32 {
	if o.Visibility <= 0 {
		return 60
	}
	return int32(max(o.Visibility.Round(time.Second), time.Second) / time.Second)
}

// batch returns how many messages the next receive may take.
func (o Options) batch(done int) int32 {
	if o.Max > 0 {
		return int32(min(10, o.Max-done))
	}
	return 10
}

// receive takes up to n messages from url with their message attributes,
// waiting a second so that an empty answer means an empty queue. It is not
// cancelled with ctx: a receive cut off after SQS answered would leave its
// messages hidden for the visibility timeout, with nobody to move them.
func receive(ctx context.Context, api API, url string, n, vis int32) ([]types.Message, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: n, VisibilityTimeout: vis, WaitTimeSeconds: 1,
		MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameMessageGroupId,
			types.MessageSystemAttributeNameDeadLetterQueueSourceArn,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %w", url, err)
	}
	return out.Messages, nil
}

// Counts is what Count found.
type Counts struct {
	// Total is the number of messages counted.
	Total int
	// ByReason counts them by DeadLetterReason (NoReason for none).
	ByReason map[string]int
	// Foreign counts, by their DeadLetterQueueSourceArn, those SQS
	// dead-lettered from a queue other than Options.SourceARN (included in
	// Total and ByReason): Move leaves them.
	Foreign map[string]int
	// Unverified and Unkeyed count those Move would leave as such (see
	// Result), included in Total and ByReason.
	Unverified, Unkeyed int
	// Selected counts those a Move with the same Options would move, and
	// Filtered those it would leave for Options.Reasons or ExcludeReasons
	// (Result.Left).
	Selected, Filtered int
}

// Reasons returns the reasons, the most frequent first.
func (c Counts) Reasons() []string {
	rs := make([]string, 0, len(c.ByReason))
	for r := range c.ByReason {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool {
		if c.ByReason[rs[i]] != c.ByReason[rs[j]] {
			return c.ByReason[rs[i]] > c.ByReason[rs[j]]
		}
		return rs[i] < rs[j]
	})
	return rs
}

// Count receives the messages of the dead-letter queue dlqURL (at most
// o.Max), counts them by reason, and makes each batch visible again as soon
// as the whole queue has been seen. Nothing is sent or deleted; each message's
// receive count goes up by one.
func Count(ctx context.Context, api API, dlqURL string, o Options) (Counts, error) {
	c := Counts{ByReason: map[string]int{}, Foreign: map[string]int{}}
	var held []types.Message
	seen := map[string]struct{}{}
	defer func() { release(api, dlqURL, held) }()
	for o.Max == 0 || c.Total < o.Max {
		if err := ctx.Err(); err != nil {
			return c, err
		}
		ms, err := receive(ctx, api, dlqURL, o.batch(c.Total), o.visibility())
		if err != nil {
			return c, err
		}
		if len(ms) == 0 {
			break
		}
		held = append(held, ms...)
		fresh := 0
		for _, m := range ms {
			// A count longer than the visibility sees messages again.
			if _, ok := seen[aws.ToString(m.MessageId)]; ok {
				continue
			}
			seen[aws.ToString(m.MessageId)] = struct{}{}
			c.ByReason[reasonOf(m)]++
			switch k := o.classify(m); {
			case k == foreign:
				c.Foreign[SourceOf(m)]++
			case k == unverified:
				c.Unverified++
			case k == unkeyed && !o.MoveUnkeyed:
				c.Unkeyed++
			case o.selects(reasonOf(m)):
				c.Selected++
			default:
				c.Filtered++
			}
			fresh++
		}
		if fresh == 0 {
			break
		}
		c.Total += fresh
		if o.Progress != nil {
			o.Progress(c.Total)
		}
	}
	return c, nil
}

func reasonOf(m types.Message) string {
	if v, ok := m.MessageAttributes[ReasonAttribute]; ok && aws.ToString(v.StringValue) != "" {
		return aws.ToString(v.StringValue)
	}
	return NoReason
}

// release makes messages visible again at once, ten at a time. It runs
// even when the caller's context is cancelled: hidden messages would
// otherwise stay hidden for the whole visibility timeout.
func release(api API, url string, ms []types.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for start := 0; start < len(ms); start += 10 {
		batch := ms[start:min(start+10, len(ms))]
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(batch))
		for i, m := range batch {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
			}
		}
		// A failure leaves them hidden until their visibility ends: no harm.
		_, _ = api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: entries})
	}
}

// Result is what Move did.
type Result struct {
	// Moved counts messages sent to the source queue and deleted from the
	// dead-letter queue.
	Moved int
	// Failed counts messages whose send or delete failed: sent but not
	// deleted ones are in both queues, unsent ones still in the dead-letter
	// queue, visible again.
	Failed int
	// Left counts messages Options.Reasons or ExcludeReasons left in the
	// dead-letter queue, visible again when Move returns.
	Left int
	// Foreign counts, by their DeadLetterQueueSourceArn, the messages SQS
	// dead-lettered from a queue other than Options.SourceARN: left in the
	// dead-letter queue, visible again when Move returns.
	Foreign map[string]int
	// Unverified names (by their id in the dead-letter queue) the messages
	// sent to the dead-letter queue directly whose OriginalIDAttribute
	// does not verify with Options.Secret: forged by someone allowed to
	// send there, or signed with another secret. Left in the dead-letter
	// queue whatever the options.
	Unverified []string
	// Unkeyed names the messages left because moving them would lose the
	// id a message-id key is taken from (see Options.MoveUnkeyed): sent
	// directly without OriginalIDAttribute (the worker's own attributes
	// found no room, or not the worker's), or dead-lettered by SQS with
	// no room or no Secret to sign its id.
	Unkeyed []string
	// CameBack says that Move stopped because a message it had moved was
	// back in the dead-letter queue (dead-lettered again while it ran).
	CameBack bool
}

// Move moves the dead-letter queue's messages (at most o.Max) to the source
// queue, up to ten at a time and at most o.MaxBatchBytes a send: each batch
// is sent, then the sent messages deleted. Messages the reason filters do
// not select are left, visible again when Move returns. Move stops when the
// queue reads empty, after o.Depth distinct messages, or when a message it
// moved comes back (dead-lettered again while it runs: moving it again
// would chase it for ever). Cancelling ctx stops after the batch in flight,
// which is finished (within 30 seconds) so that it is not moved twice.
func Move(ctx context.Context, api API, sourceURL, dlqURL string, o Options) (Result, error) {
	var r Result
	seen := map[string]bool{}          // DLQ message ids received
	moved := map[string]bool{}         // moved messages: original ids and the ids they were sent with
	left := map[string]types.Message{} // not selected, held hidden until Move returns
	defer func() { release(api, dlqURL, values(left)) }()
	for o.Max == 0 || r.Moved+r.Failed < o.Max {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if o.Depth > 0 && len(seen) >= o.Depth {
			return r, nil
		}
		ms, err := receive(ctx, api, dlqURL, o.batch(r.Moved+r.Failed), o.visibility())
		if err != nil {
			return r, err
		}
		if len(ms) == 0 {
			return r, nil
		}
		var take, back []types.Message
		fresh := 0
		for _, m := range ms {
			id := aws.ToString(m.MessageId)
			switch {
			case moved[id] || moved[originalID(m)]:
				back = append(back, m)
			case seen[id]: // left earlier, visible again after a long run
				left[id] = m
			default:
				seen[id] = true
				fresh++
				switch k := o.classify(m); {
				case k == foreign:
					left[id] = m
					if r.Foreign == nil {
						r.Foreign = map[string]int{}
					}
					r.Foreign[SourceOf(m)]++
				case k == unverified:
					left[id] = m
					r.Unverified = append(r.Unverified, id)
				case k == unkeyed && !o.MoveUnkeyed:
					left[id] = m
					r.Unkeyed = append(r.Unkeyed, id)
				case o.selects(reasonOf(m)):
					take = append(take, m)
				default:
					left[id] = m
					r.Left++
				}
			}
		}
		release(api, dlqURL, back)
		for len(take) > 0 {
			n := sizedBatch(take, o.maxBatchBytes(), o.Secret)
			ids, err := moveBatch(api, sourceURL, dlqURL, take[:n], o.Secret)
			for _, m := range take[:n] {
				moved[originalID(m)] = true
			}
			for _, id := range ids {
				moved[id] = true
			}
			r.Moved += len(ids)
			r.Failed += n - len(ids)
			take = take[n:]
			if err != nil {
				release(api, dlqURL, take)
				r.Failed += len(take)
				return r, err
			}
		}
		if o.Progress != nil {
			o.Progress(r.Moved)
		}
		if len(back) > 0 {
			r.CameBack = true
			return r, nil
		}
		if fresh == 0 {
			return r, nil // only messages seen before: nothing new is in reach
		}
	}
	return r, nil
}

// SourceOf is the ARN of the queue SQS dead-lettered m from (its
// DeadLetterQueueSourceArn), or "" for a message sent to the dead-letter
// queue directly.
func SourceOf(m types.Message) string {
	return m.Attributes[string(types.MessageSystemAttributeNameDeadLetterQueueSourceArn)]
}

// originalID is what m's OriginalIDAttribute says, signed or not (to
// recognize a message that comes back), or its own id.
func originalID(m types.Message) string {
	if v, ok := m.MessageAttributes[OriginalIDAttribute]; ok && aws.ToString(v.StringValue) != "" {
		return aws.ToString(v.StringValue)
	}
	return aws.ToString(m.MessageId)
}

// kind is what Move may do with a message.
type kind int

const (
	movable    kind = iota
	foreign         // SQS dead-lettered it from another queue
	unverified      // sent directly, with an OriginalIDAttribute that does not verify
	unkeyed         // its moved copy could not carry a verified original id
)

// verified reports whether m's OriginalIDAttribute verifies with s.
func verified(m types.Message, s origin.Secret) bool {
	_, ok := origin.Verify(s, attrValue(m, OriginalIDAttribute), attrValue(m, FirstReceivedAttribute), aws.ToString(m.Body))
	return ok
}

func attrValue(m types.Message, name string) string {
	return aws.ToString(m.MessageAttributes[name].StringValue)
}

// classify says what m is: another queue's, a direct send that is not the
// worker's, one whose move would lose its original id, or movable.
func (o Options) classify(m types.Message) kind {
	src := SourceOf(m)
	switch {
	case o.SourceARN != "" && src != "" && src != o.SourceARN:
		return foreign
	case verified(m, o.Secret):
		return movable
	case src == "" && attrValue(m, OriginalIDAttribute) != "":
		return unverified
	case src == "":
		return unkeyed
	}
	if _, ok := Attributes(m, o.Secret)[OriginalIDAttribute]; !ok {
		return unkeyed // no room or no secret to sign its id
	}
	return movable
}

func values(ms map[string]types.Message) []types.Message {
	out := make([]types.Message, 0, len(ms))
	for _, m := range ms {
		out = append(out, m)
	}
	return out
}

// sizedBatch returns how many of ms, from the first, one send takes: at
// most ten, and at most maxBytes of bodies and attributes (one at least).
func sizedBatch(ms []types.Message, maxBytes int, secret origin.Secret) int {
	total := 0
	for i, m := range ms {
		size := len(aws.ToString(m.Body))
		for k, v := range Attributes(m, secret) {
			size += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
		}
		if i == 10 || i > 0 && total+size > maxBytes {
			return i
		}
		total += size
	}
	return len(ms)
}

// moveBatch sends ms to the source queue and deletes the ones sent,
// returning the ids the moved messages were sent with. Unsent ones are
// made visible again.
func moveBatch(api API, sourceURL, dlqURL string, ms []types.Message, secret origin.Secret) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	entries := make([]types.SendMessageBatchRequestEntry, len(ms))
	for i, m := range ms {
		entries[i] = types.SendMessageBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), MessageBody: m.Body, MessageAttributes: Attributes(m, secret),
		}
		if g, ok := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]; ok {
			entries[i].MessageGroupId = aws.String(g)
			entries[i].MessageDeduplicationId = m.MessageId
		}
	}
	out, err := api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(sourceURL), Entries: entries})
	if err != nil {
		release(api, dlqURL, ms)
		return nil, fmt.Errorf("send to %s: %w", sourceURL, err)
	}
	var sent, unsent []types.Message
	sentAs := map[string]string{} // DLQ receipt handle -> the id it was sent with
	for _, s := range out.Successful {
		i, _ := strconv.Atoi(aws.ToString(s.Id))
		sent = append(sent, ms[i])
		sentAs[aws.ToString(ms[i].ReceiptHandle)] = aws.ToString(s.MessageId)
	}
	for _, f := range out.Failed {
		i, _ := strconv.Atoi(aws.ToString(f.Id))
		unsent = append(unsent, ms[i])
	}
	release(api, dlqURL, unsent)
	if len(sent) == 0 {
		return nil, firstFailure(out.Failed)
	}
	del := make([]types.DeleteMessageBatchRequestEntry, len(sent))
	for i, m := range sent {
		del[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
	}
	dout, err := api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(dlqURL), Entries: del})
	if err != nil {
		return nil, fmt.Errorf("delete from %s after sending %d (they are in both queues; the claims absorb the duplicates): %w", dlqURL, len(sent), err)
	}
	moved := make([]string, 0, len(dout.Successful))
	for _, d := range dout.Successful {
		i, _ := strconv.Atoi(aws.ToString(d.Id))
		moved = append(moved, sentAs[aws.ToString(sent[i].ReceiptHandle)])
	}
	if len(dout.Failed) > 0 {
		return moved, fmt.Errorf("delete from %s: %d of %d failed after sending (in both queues): %s", dlqURL, len(dout.Failed), len(sent), aws.ToString(dout.Failed[0].Message))
	}
	if len(out.Failed) > 0 {
		return moved, firstFailure(out.Failed)
	}
	return moved, nil
}

func firstFailure(f []types.BatchResultErrorEntry) error {
	if len(f) == 0 {
		return nil
	}
	return fmt.Errorf("send: %d failed: %s: %s", len(f), aws.ToString(f[0].Code), aws.ToString(f[0].Message))
}

// maxAttributes is SQS's limit of message attributes per message.
const maxAttributes = 10

// Attributes returns the message attributes a moved copy of m carries:
// m's own without ReasonAttribute. An OriginalIDAttribute that verifies
// with s is kept with the FirstReceivedAttribute it covers; one that does
// not is dropped with it. A message SQS dead-lettered (it has a
// DeadLetterQueueSourceArn, and SQS kept its id: the id it first arrived
// with) without a verified one gets its id, signed with s, when there is
// a secret and room.
func Attributes(m types.Message, s origin.Secret) map[string]types.MessageAttributeValue {
	keep := verified(m, s)
	out := make(map[string]types.MessageAttributeValue, len(m.MessageAttributes)+1)
	for k, v := range m.MessageAttributes {
		if k == ReasonAttribute || !keep && (k == OriginalIDAttribute || k == FirstReceivedAttribute) {
			continue
		}
		out[k] = v
	}
	if !keep && s != "" && SourceOf(m) != "" && m.MessageId != nil && len(out) < maxAttributes {
		out[OriginalIDAttribute] = types.MessageAttributeValue{DataType: aws.String("String"),
			StringValue: aws.String(origin.Sign(s, aws.ToString(m.MessageId), "", aws.ToString(m.Body)))}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// ErrNativeUnsupported means the SQS endpoint does not implement
// StartMessageMoveTask (the emulator answers an HTML 500).
var ErrNativeUnsupported = errors.New("redrive: this SQS endpoint does not support StartMessageMoveTask")

// StartNative starts SQS's move task from the dead-letter queue dlqARN and
// returns its task handle. It names no destination, so SQS returns each
// message to the queue it was dead-lettered from: another queue's messages
// go back to that queue, never to the payments queue.
func StartNative(ctx context.Context, api API, dlqARN string) (string, error) {
	out, err := api.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{
		SourceArn: aws.String(dlqARN),
	}, func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
	if err != nil {
		if unsupported(err) {
			return "", fmt.Errorf("%w (%v)", ErrNativeUnsupported, short(err))
		}
		return "", fmt.Errorf("start message move task: %w", err)
	}
	return aws.ToString(out.TaskHandle), nil
}

// unsupported reports whether err says the operation does not exist there,
// rather than that it failed: an error code naming an unknown operation, an
// HTTP 501, or an HTTP 500 that is not an SQS error document at all.
func unsupported(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "UnknownOperationException", "UnknownOperation", "InvalidAction", "UnsupportedOperation", "NotImplemented":
			return true
		}
	}
	var re *awshttp.ResponseError
	if !errors.As(err, &re) {
		return false
	}
	var de *smithy.DeserializationError
	return re.HTTPStatusCode() == 501 || re.HTTPStatusCode() == 500 && errors.As(err, &de)
}

func short(err error) string {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return "HTTP " + strconv.Itoa(re.HTTPStatusCode())
	}
	return err.Error()
}

// Task is the state of a native move task.
type Task struct {
	// Status is RUNNING, COMPLETED, CANCELLING, CANCELLED or FAILED.
	Status string
	// Moved and ToMove count messages, as SQS reports them.
	Moved, ToMove int64
	// Failure is SQS's reason for a FAILED task.
	Failure string
}

// WaitNative polls the most recent move task from dlqARN every interval
// until it is no longer running, reporting each state to progress (if
// set). Cancelling ctx stops the waiting, not the task.
func WaitNative(ctx context.Context, api API, dlqARN string, interval time.Duration, progress func(Task)) (Task, error) {
	for {
		out, err := api.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(dlqARN), MaxResults: aws.Int32(1)})
		if err != nil {
			return Task{}, fmt.Errorf("list message move tasks: %w", err)
		}
		if len(out.Results) == 0 {
			return Task{}, errors.New("list message move tasks: no task found")
		}
		r := out.Results[0]
		t := Task{Status: aws.ToString(r.Status), Moved: r.ApproximateNumberOfMessagesMoved,
			ToMove: aws.ToInt64(r.ApproximateNumberOfMessagesToMove), Failure: aws.ToString(r.FailureReason)}
		if progress != nil {
			progress(t)
		}
		if t.Status != "RUNNING" && t.Status != "CANCELLING" {
			return t, nil
		}
		select {
		case <-ctx.Done():
			return t, ctx.Err()
		case <-time.After(interval):
		}
	}
}
