package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/redrive"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

var (
	_ sqsworker.SQSAPI = (*SQS)(nil)
	_ redrive.API      = (*SQS)(nil)
)

// SQS limits the simulated queues enforce, as documented by AWS.
const (
	// MaxMessageBytes is the largest body plus message attributes (1 MiB).
	MaxMessageBytes = 1 << 20
	// MaxMessageAttributes is the most message attributes a message carries.
	MaxMessageAttributes = 10
	// fifoDedupWindow is how long a FIFO deduplication id is remembered.
	fifoDedupWindow = 5 * time.Minute
)

// ErrSQS marks an error answered by the simulated SQS (the API's own
// refusals: a bad receipt handle, a message too large, no such queue).
var ErrSQS = errors.New("sim: sqs")

// QueueConfig describes a simulated queue.
type QueueConfig struct {
	// Name is the queue's name; a FIFO queue's ends in ".fifo". Required.
	Name string
	// VisibilityTimeout is the queue's default visibility timeout. Defaults to 30s.
	VisibilityTimeout time.Duration
	// Retention is the MessageRetentionPeriod. Defaults to 4 days.
	Retention time.Duration
	// DeadLetter names the redrive target (a queue created before), or "".
	// Defaults to "": no redrive policy.
	DeadLetter string
	// MaxReceiveCount is the redrive policy's maxReceiveCount. Defaults to 5
	// when DeadLetter is set.
	MaxReceiveCount int
}

// Duplicates decides whether SQS hands a standard queue's message out again
// while it is held (SQS's at-least-once delivery): called at a receive with
// the message id and its receive count, it returns how long after the
// receive the copy is handed out, or 0 for none.
type Duplicates func(messageID string, receive int) time.Duration

// StaleDeletes decides whether a delete with a receipt handle from an
// earlier receive deletes the message (SQS says it may not).
type StaleDeletes func(messageID string, receive int) bool

// SQS is an in-memory SQS on the caller's clock (the synctest bubble's
// virtual one in the simulator): standard and FIFO queues, long polling,
// visibility timeouts, receive counts, redrive to a dead-letter queue.
// It implements sqsworker.SQSAPI and redrive.API and is safe for concurrent use.
//
// It does not model: message timers and queue-level DelaySeconds other than
// a message's DelaySeconds, retention expiry, high-throughput FIFO
// partitions, fair queues, ordering of a standard queue (it hands out in
// send order), in-flight limits, the native move task
// (StartMessageMoveTask answers unsupported), MD5 digests, permissions,
// and the per-call latency of the real service.
type SQS struct {
	now        func() time.Time
	duplicates Duplicates
	stale      StaleDeletes

	mu      sync.Mutex
	queues  map[string]*queue // by URL
	changed chan struct{}     // closed and replaced at each change, for long polls
	seq     int
}

// SQSConfig configures an SQS.
type SQSConfig struct {
	// Now is AWS's clock. Defaults to time.Now (virtual in a synctest bubble).
	Now func() time.Time
	// Duplicates decides duplicate deliveries on standard queues. Defaults
	// to none.
	Duplicates Duplicates
	// StaleDeletes decides whether a stale receipt handle deletes. Defaults
	// to always.
	StaleDeletes StaleDeletes
}

// NewSQS returns an SQS with no queues.
func NewSQS(cfg SQSConfig) *SQS {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Duplicates == nil {
		cfg.Duplicates = func(string, int) time.Duration { return 0 }
	}
	if cfg.StaleDeletes == nil {
		cfg.StaleDeletes = func(string, int) bool { return true }
	}
	return &SQS{now: cfg.Now, duplicates: cfg.Duplicates, stale: cfg.StaleDeletes,
		queues: make(map[string]*queue), changed: make(chan struct{})}
}

type queue struct {
	cfg    QueueConfig
	url    string
	fifo   bool
	dlq    *queue
	msgs   []*message // in send order; deleted ones are removed
	dedup  map[string]dedupEntry
	sent   int
	moved  int // moved in by redrive
	nextID int
}

type dedupEntry struct {
	id string
	at time.Time
}

type message struct {
	id        string
	body      string
	attrs     map[string]types.MessageAttributeValue
	group     string
	dedup     string
	sentAt    time.Time
	visibleAt time.Time
	receives  int
	firstRecv time.Time
	receipt   string // the latest receipt handle
	inFlight  bool   // received, visibility not yet expired (FIFO group lock)
	source    string // the ARN of the queue SQS dead-lettered it from (DeadLetterQueueSourceArn)
}

// CreateQueue creates a queue and returns its URL.
func (s *SQS) CreateQueue(cfg QueueConfig) (string, error) {
	if cfg.VisibilityTimeout == 0 {
		cfg.VisibilityTimeout = 30 * time.Second
	}
	if cfg.Retention == 0 {
		cfg.Retention = 4 * 24 * time.Hour
	}
	if cfg.DeadLetter != "" && cfg.MaxReceiveCount == 0 {
		cfg.MaxReceiveCount = 5
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	url := "https://sqs.sim.local/000000000000/" + cfg.Name
	if cfg.Name == "" {
		return "", fmt.Errorf("%w: queue name required", ErrSQS)
	}
	q := &queue{cfg: cfg, url: url, fifo: strings.HasSuffix(cfg.Name, ".fifo"), dedup: make(map[string]dedupEntry)}
	if cfg.DeadLetter != "" {
		d := s.queues["https://sqs.sim.local/000000000000/"+cfg.DeadLetter]
		if d == nil {
			return "", fmt.Errorf("%w: dead-letter queue %s does not exist", ErrSQS, cfg.DeadLetter)
		}
		if d.fifo != q.fifo {
			return "", fmt.Errorf("%w: a FIFO queue's dead-letter queue must be FIFO, and a standard one's standard", ErrSQS)
		}
		q.dlq = d
	}
	s.queues[url] = q
	return url, nil
}

func (s *SQS) queue(url *string) (*queue, error) {
	q := s.queues[aws.ToString(url)]
	if q == nil {
		return nil, fmt.Errorf("%w: AWS.SimpleQueueService.NonExistentQueue: %s", ErrSQS, aws.ToString(url))
	}
	return q, nil
}

// notify wakes long polls; called with mu held.
func (s *SQS) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// QueueStats are a queue's counts at an instant.
type QueueStats struct {
	// Visible and InFlight count the messages waiting and received.
	Visible, InFlight int
	// Sent counts SendMessage calls that added a message (deduplicated FIFO
	// sends are not counted).
	Sent int
}

// Stats returns the queue's counts.
func (s *SQS) Stats(url string) QueueStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[url]
	if q == nil {
		return QueueStats{}
	}
	now := s.now()
	st := QueueStats{Sent: q.sent}
	for _, m := range q.msgs {
		if m.visibleAt.After(now) && m.receives > 0 {
			st.InFlight++
		} else {
			st.Visible++
		}
	}
	return st
}

// Messages returns copies of the queue's messages (visible or not), as a
// receive would show them but without receiving them.
func (s *SQS) Messages(url string) []types.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[url]
	if q == nil {
		return nil
	}
	out := make([]types.Message, 0, len(q.msgs))
	for _, m := range q.msgs {
		out = append(out, m.view(q, "", nil))
	}
	return out
}

func (m *message) view(q *queue, receipt string, want []string) types.Message {
	attrs := map[string]string{
		string(types.MessageSystemAttributeNameApproximateReceiveCount): strconv.Itoa(m.receives),
		string(types.MessageSystemAttributeNameSentTimestamp):           strconv.FormatInt(m.sentAt.UnixMilli(), 10),
	}
	if !m.firstRecv.IsZero() {
		attrs[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)] = strconv.FormatInt(m.firstRecv.UnixMilli(), 10)
	}
	if m.source != "" {
		attrs[string(types.MessageSystemAttributeNameDeadLetterQueueSourceArn)] = m.source
	}
	if q.fifo {
		attrs[string(types.MessageSystemAttributeNameMessageGroupId)] = m.group
		attrs[string(types.MessageSystemAttributeNameMessageDeduplicationId)] = m.dedup
	}
	ma := make(map[string]types.MessageAttributeValue, len(m.attrs))
	for k, v := range m.attrs {
		if want == nil || slices.Contains(want, "All") || slices.Contains(want, ".*") || slices.Contains(want, k) {
			ma[k] = v
		}
	}
	return types.Message{MessageId: aws.String(m.id), Body: aws.String(m.body), ReceiptHandle: aws.String(receipt),
		Attributes: attrs, MessageAttributes: ma}
}

// receiveMessage answers ReceiveMessage (for sqsworker.SQSAPI): it waits up to WaitTimeSeconds
// (long polling) for a visible message. A message whose receive count has
// reached the redrive policy's maxReceiveCount is moved to the dead-letter
// queue instead of being received again.
func (s *SQS) receiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput) (*sqs.ReceiveMessageOutput, error) {
	n := int(in.MaxNumberOfMessages)
	if n == 0 {
		n = 1
	}
	if n < 1 || n > 10 {
		return nil, fmt.Errorf("%w: InvalidParameterValue: MaxNumberOfMessages %d", ErrSQS, n)
	}
	if in.WaitTimeSeconds < 0 || in.WaitTimeSeconds > 20 {
		return nil, fmt.Errorf("%w: InvalidParameterValue: WaitTimeSeconds %d", ErrSQS, in.WaitTimeSeconds)
	}
	deadline := s.now().Add(time.Duration(in.WaitTimeSeconds) * time.Second)
	for {
		s.mu.Lock()
		q, err := s.queue(in.QueueUrl)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		vis := q.cfg.VisibilityTimeout
		if in.VisibilityTimeout > 0 {
			vis = time.Duration(in.VisibilityTimeout) * time.Second
		}
		now := s.now()
		out, next := s.take(q, n, vis, now, in.MessageAttributeNames)
		changed := s.changed
		s.mu.Unlock()
		if len(out) > 0 || !now.Before(deadline) {
			return &sqs.ReceiveMessageOutput{Messages: out}, nil
		}
		wait := deadline.Sub(now)
		if !next.IsZero() && next.Sub(now) < wait {
			wait = max(next.Sub(now), time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// take receives up to n messages; it also returns when the next invisible
// message becomes visible. Called with mu held.
func (s *SQS) take(q *queue, n int, vis time.Duration, now time.Time, want []string) (out []types.Message, next time.Time) {
	locked := map[string]bool{} // FIFO groups with a message in flight
	if q.fifo {
		for _, m := range q.msgs {
			if m.inFlight && m.visibleAt.After(now) {
				locked[m.group] = true
			}
		}
	}
	var group string // a FIFO receive takes from one group
	for i := 0; i < len(q.msgs) && len(out) < n; i++ {
		m := q.msgs[i]
		if m.visibleAt.After(now) {
			if next.IsZero() || m.visibleAt.Before(next) {
				next = m.visibleAt
			}
			if q.fifo {
				locked[m.group] = true // later messages of a group wait for this one (delayed or in flight)
			}
			continue
		}
		m.inFlight = false
		if q.fifo && (locked[m.group] || (group != "" && m.group != group)) {
			locked[m.group] = true
			continue
		}
		if q.dlq != nil && m.receives >= q.cfg.MaxReceiveCount {
			// Redrive: SQS moves it, keeping its id and attributes.
			q.msgs = slices.Delete(q.msgs, i, i+1)
			i--
			m.visibleAt, m.inFlight, m.receipt = now, false, ""
			m.source = "arn:aws:sqs:sim:000000000000:" + q.cfg.Name
			q.dlq.msgs = append(q.dlq.msgs, m)
			if q.fifo {
				locked[m.group] = true // the rest of the group waits for the next receive
			}
			continue
		}
		m.receives++
		if m.firstRecv.IsZero() {
			m.firstRecv = now
		}
		s.seq++
		m.receipt = fmt.Sprintf("%s#%d#%d", m.id, m.receives, s.seq)
		m.visibleAt, m.inFlight = now.Add(vis), true
		if d := s.duplicates(m.id, m.receives); !q.fifo && d > 0 && d < vis {
			m.visibleAt = now.Add(d) // handed out again by a later receive while held
		}
		if q.fifo {
			group = m.group
		}
		out = append(out, m.view(q, m.receipt, want))
	}
	return out, next
}

// find returns the message a receipt handle names, and whether the handle
// is the latest one.
func (q *queue) find(receipt string) (int, *message, bool) {
	id, _, _ := strings.Cut(receipt, "#")
	for i, m := range q.msgs {
		if m.id == id {
			return i, m, m.receipt == receipt
		}
	}
	return -1, nil, false
}

func validReceipt(r string) bool { return strings.Count(r, "#") == 2 }

// deleteMessageBatch answers DeleteMessageBatch (for sqsworker.SQSAPI). A stale receipt handle (the
// message was received again since) deletes the message if StaleDeletes says
// so, and succeeds either way, as SQS may.
func (s *SQS) deleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput) (*sqs.DeleteMessageBatchOutput, error) {
	if len(in.Entries) == 0 || len(in.Entries) > 10 {
		return nil, fmt.Errorf("%w: %d entries: must be 1 to 10", ErrSQS, len(in.Entries))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		r := aws.ToString(e.ReceiptHandle)
		if !validReceipt(r) {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid"), SenderFault: true})
			continue
		}
		if i, m, latest := q.find(r); m != nil && (latest || s.stale(m.id, m.receives)) {
			q.msgs = slices.Delete(q.msgs, i, i+1)
		}
		out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	s.notify()
	return out, nil
}

// changeVisibility applies one ChangeMessageVisibility; called with mu held.
// A receipt handle from an earlier receive changes the message's visibility
// as the latest one does (the emulator does so: TestSQSAgreesWithEmulator);
// a message no longer in the queue, or not in flight, is refused.
func (s *SQS) changeVisibility(q *queue, receipt string, seconds int32) error {
	if seconds < 0 || time.Duration(seconds)*time.Second > sqsworker.MaxVisibility {
		return fmt.Errorf("%w: InvalidParameterValue: VisibilityTimeout %d", ErrSQS, seconds)
	}
	_, m, _ := q.find(receipt)
	now := s.now()
	switch {
	case m == nil || !validReceipt(receipt):
		return fmt.Errorf("%w: ReceiptHandleIsInvalid: %s", ErrSQS, receipt)
	case !m.visibleAt.After(now) || !m.inFlight:
		return fmt.Errorf("%w: MessageNotInflight: %s", ErrSQS, m.id)
	case now.Add(time.Duration(seconds) * time.Second).After(m.firstRecvOfReceipt(receipt).Add(sqsworker.MaxVisibility)):
		return fmt.Errorf("%w: InvalidParameterValue: total visibility timeout exceeds 12 hours", ErrSQS)
	}
	m.visibleAt = now.Add(time.Duration(seconds) * time.Second)
	if seconds == 0 {
		m.inFlight = false
		s.notify()
	}
	return nil
}

// firstRecvOfReceipt is when the receive that issued receipt happened; the
// simulator does not keep it, so the 12-hour cap is counted from the
// message's first receive, which is earlier or equal: stricter than SQS.
func (m *message) firstRecvOfReceipt(string) time.Time { return m.firstRecv }

// changeMessageVisibility answers ChangeMessageVisibility (for sqsworker.SQSAPI).
func (s *SQS) changeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput) (*sqs.ChangeMessageVisibilityOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if err := s.changeVisibility(q, aws.ToString(in.ReceiptHandle), in.VisibilityTimeout); err != nil {
		return nil, err
	}
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

// changeMessageVisibilityBatch answers ChangeMessageVisibilityBatch (for sqsworker.SQSAPI).
func (s *SQS) changeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if len(in.Entries) == 0 || len(in.Entries) > 10 {
		return nil, fmt.Errorf("%w: %d entries: must be 1 to 10", ErrSQS, len(in.Entries))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		if err := s.changeVisibility(q, aws.ToString(e.ReceiptHandle), e.VisibilityTimeout); err != nil {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"), Message: aws.String(err.Error()), SenderFault: true})
			continue
		}
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// send adds one message; called with mu held.
func (s *SQS) send(q *queue, body string, attrs map[string]types.MessageAttributeValue, delay int32, group, dedup *string) (string, error) {
	size := len(body)
	for k, v := range attrs {
		size += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	switch {
	case body == "":
		return "", fmt.Errorf("%w: MissingParameter: MessageBody", ErrSQS)
	case !utf8.ValidString(body):
		return "", fmt.Errorf("%w: InvalidMessageContents", ErrSQS)
	case size > MaxMessageBytes:
		return "", fmt.Errorf("%w: InvalidParameterValue: message of %d bytes is longer than %d", ErrSQS, size, MaxMessageBytes)
	case len(attrs) > MaxMessageAttributes:
		return "", fmt.Errorf("%w: InvalidParameterValue: %d message attributes, at most %d", ErrSQS, len(attrs), MaxMessageAttributes)
	case q.fifo && aws.ToString(group) == "":
		return "", fmt.Errorf("%w: MissingParameter: MessageGroupId is required for a FIFO queue", ErrSQS)
	case q.fifo && aws.ToString(dedup) == "":
		return "", fmt.Errorf("%w: InvalidParameterValue: MessageDeduplicationId required (no content-based deduplication)", ErrSQS)
	case q.fifo && delay != 0:
		return "", fmt.Errorf("%w: InvalidParameterValue: DelaySeconds per message is not supported on FIFO queues", ErrSQS)
	}
	now := s.now()
	if q.fifo {
		if d, ok := q.dedup[*dedup]; ok && now.Sub(d.at) < fifoDedupWindow {
			return d.id, nil
		}
	}
	q.nextID++
	id := fmt.Sprintf("%s-%06d", strings.TrimSuffix(q.cfg.Name, ".fifo"), q.nextID)
	m := &message{id: id, body: body, attrs: attrs, group: aws.ToString(group), dedup: aws.ToString(dedup),
		sentAt: now, visibleAt: now.Add(time.Duration(delay) * time.Second)}
	if q.fifo {
		q.dedup[m.dedup] = dedupEntry{id: id, at: now}
	}
	q.msgs = append(q.msgs, m)
	q.sent++
	s.notify()
	return id, nil
}

// sendMessage answers SendMessage (for sqsworker.SQSAPI).
func (s *SQS) sendMessage(_ context.Context, in *sqs.SendMessageInput) (*sqs.SendMessageOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	id, err := s.send(q, aws.ToString(in.MessageBody), in.MessageAttributes, in.DelaySeconds, in.MessageGroupId, in.MessageDeduplicationId)
	if err != nil {
		return nil, err
	}
	return &sqs.SendMessageOutput{MessageId: aws.String(id)}, nil
}

// sendMessageBatch answers SendMessageBatch (for redrive.API).
func (s *SQS) sendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
	if len(in.Entries) == 0 || len(in.Entries) > 10 {
		return nil, fmt.Errorf("%w: %d entries: must be 1 to 10", ErrSQS, len(in.Entries))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		id, err := s.send(q, aws.ToString(e.MessageBody), e.MessageAttributes, e.DelaySeconds, e.MessageGroupId, e.MessageDeduplicationId)
		if err != nil {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"), Message: aws.String(err.Error()), SenderFault: true})
			continue
		}
		q.moved++
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String(id)})
	}
	return out, nil
}

// getQueueAttributes answers GetQueueAttributes (for sqsworker.SQSAPI).
func (s *SQS) getQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput) (*sqs.GetQueueAttributesOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	attrs := map[string]string{
		string(types.QueueAttributeNameVisibilityTimeout):      strconv.Itoa(int(q.cfg.VisibilityTimeout / time.Second)),
		string(types.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(int(q.cfg.Retention / time.Second)),
		string(types.QueueAttributeNameQueueArn):               "arn:aws:sqs:sim:000000000000:" + q.cfg.Name,
	}
	if q.fifo {
		attrs[string(types.QueueAttributeNameFifoQueue)] = "true"
	}
	if q.dlq != nil {
		attrs[string(types.QueueAttributeNameRedrivePolicy)] = fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:sim:000000000000:%s","maxReceiveCount":%d}`,
			q.dlq.cfg.Name, q.cfg.MaxReceiveCount)
	}
	return &sqs.GetQueueAttributesOutput{Attributes: attrs}, nil
}

// getQueueURL answers GetQueueUrl (for sqsworker.SQSAPI).
func (s *SQS) getQueueURL(_ context.Context, in *sqs.GetQueueUrlInput) (*sqs.GetQueueUrlOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(aws.String("https://sqs.sim.local/000000000000/" + aws.ToString(in.QueueName)))
	if err != nil {
		return nil, err
	}
	return &sqs.GetQueueUrlOutput{QueueUrl: aws.String(q.url)}, nil
}

// StartMessageMoveTask implements redrive.API: the simulator does not model
// SQS's native move task.
func (s *SQS) StartMessageMoveTask(context.Context, *sqs.StartMessageMoveTaskInput, ...func(*sqs.Options)) (*sqs.StartMessageMoveTaskOutput, error) {
	return nil, fmt.Errorf("%w: UnsupportedOperation: the simulator has no native move task", ErrSQS)
}

// ListMessageMoveTasks implements redrive.API; see StartMessageMoveTask.
func (s *SQS) ListMessageMoveTasks(context.Context, *sqs.ListMessageMoveTasksInput, ...func(*sqs.Options)) (*sqs.ListMessageMoveTasksOutput, error) {
	return nil, fmt.Errorf("%w: UnsupportedOperation: the simulator has no native move task", ErrSQS)
}

// ReceiveMessage implements sqsworker.SQSAPI; its answer carries the simulated AWS's
// Date, which an SDK middleware in opts (the worker's clock check) reads.
func (s *SQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return answer(ctx, opts, func() (*sqs.ReceiveMessageOutput, error) { return s.receiveMessage(ctx, in) })
}

// DeleteMessageBatch implements sqsworker.SQSAPI; its answer carries the simulated AWS's
// Date, which an SDK middleware in opts (the worker's clock check) reads.
func (s *SQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return answer(ctx, opts, func() (*sqs.DeleteMessageBatchOutput, error) { return s.deleteMessageBatch(ctx, in) })
}

// ChangeMessageVisibility implements sqsworker.SQSAPI; its answer carries the simulated AWS's
// Date, which an SDK middleware in opts (the worker's clock check) reads.
func (s *SQS) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return answer(ctx, opts, func() (*sqs.ChangeMessageVisibilityOutput, error) { return s.changeMessageVisibility(ctx, in) })
}

// ChangeMessageVisibilityBatch implements sqsworker.SQSAPI; its answer carries the simulated AWS's
// Date, which an SDK middleware in opts (the worker's clock check) reads.
func (s *SQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return answer(ctx, opts, func() (*sqs.ChangeMessageVisibilityBatchOutput, error) {
		return s.changeMessageVisibilityBatch(ctx, in)
	})
}

// SendMessage implements sqsworker.SQSAPI; its answer carries the simulated AWS's
// Date, which an SDK middleware in opts (the worker's clock check) reads.
func (s *SQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return answer(ctx, opts, func() (*sqs.SendMessageOutput, error) { return s.sendMessage(ctx, in) })
}

// SendMessageBatch implements redrive.API; its answer carries the simulated AWS's
// Date, which an SDK middleware in opts (the worker's clock check) reads.
func (s *SQS) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	return answer(ctx, opts, func() (*sqs.SendMessageBatchOutput, error) { return s.sendMessageBatch(ctx, in) })
}

// GetQueueAttributes implements sqsworker.SQSAPI; its answer carries the simulated AWS's
// Date, which an SDK middleware in opts (the worker's clock check) reads.
func (s *SQS) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return answer(ctx, opts, func() (*sqs.GetQueueAttributesOutput, error) { return s.getQueueAttributes(ctx, in) })
}

// GetQueueUrl implements sqsworker.SQSAPI; its answer carries the simulated AWS's
// Date, which an SDK middleware in opts (the worker's clock check) reads.
func (s *SQS) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) { //nolint:revive // the SDK's name
	return answer(ctx, opts, func() (*sqs.GetQueueUrlOutput, error) { return s.getQueueURL(ctx, in) })
}
