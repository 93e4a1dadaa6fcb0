package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/internal/queue"
	"github.com/claimfirst/claimfirst/redrive"
	"github.com/claimfirst/claimfirst/worker/kafkaworker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// cmdRedrive is `worker redrive`: the queue's dead-letter messages back to it.
func cmdRedrive(ctx context.Context, args []string, io stdio) error {
	s := newSettings("redrive", io)
	queueURL := s.String("queue-url", "QUEUE_URL", "", "source SQS queue URL; its redrive policy names the dead-letter queue (required)")
	dryRun := s.fs.Bool("dry-run", false, "count the dead-letter messages per DeadLetterReason; change nothing")
	maxN := s.fs.Int("max", 0, "move (or count) at most this many messages (0: all)")
	native := s.fs.Bool("native", false, "use SQS's StartMessageMoveTask: faster for big queues, but it keeps DeadLetterReason, "+
		"gives messages SQS dead-lettered itself a new id (a message_id key changes), and has no -max; it names no destination, so each message "+
		"goes back to the queue SQS dead-lettered it from (another queue's to that queue; the worker's own have none, and SQS cannot move them); falls back to the loop where unsupported")
	moveUnkeyed := s.fs.Bool("move-unkeyed", false, "also move the messages whose moved copy cannot carry a verified OriginalMessageId (the worker had no room for it, "+
		"or no ORIGINAL_ID_SECRET): they get a new id, so a message_id key changes and a charge can run again; safe only with a payment_id key "+
		"and only the worker allowed to send to the dead-letter queue")
	orig := defineOrigin(s)
	rabbit := defineRabbitRedrive(s)
	var reasons, excluded stringList
	s.fs.Var(&reasons, "reason", "move only messages whose DeadLetterReason contains this text, such as a code: poison, key_reused, reconcile, permanent "+
		"(repeatable; \"none\" matches those SQS moved itself)")
	s.fs.Var(&excluded, "exclude-reason", "leave messages whose DeadLetterReason contains this text in the dead-letter queue (repeatable), e.g. key_reused or reconcile")
	s.fs.Usage = func() {
		fmt.Fprint(s.fs.Output(), `Usage: worker redrive [flags]

Moves the messages of the queue's dead-letter queue (from its redrive policy)
back to it: each is sent, then deleted, ten at a time, keeping the body and
the message attributes except DeadLetterReason, and keeping (or adding)
OriginalMessageId so that a message_id key survives. An interrupt finishes the
batch in flight; a crash between send and delete leaves a duplicate, which the
claim absorbs. -dry-run counts the messages per reason and changes nothing.

A message SQS dead-lettered from another queue (its DeadLetterQueueSourceArn
names that queue: a queue that named this dead-letter queue in its own redrive
policy) is never moved: it is left, counted and named by its source. A message
sent to the dead-letter queue directly (as the worker dead-letters) is moved
only when its OriginalMessageId verifies with ORIGINAL_ID_SECRET (the
workers'); one whose attribute does not verify is left and named, and one
without (no room among its own ten attributes, or no secret) is left and named
unless -move-unkeyed.

It moves at most the messages the dead-letter queue held when it started, and
stops when a message it moved comes back (dead-lettered again by a running
worker), so that poison is not chased for ever.

The filters choose what to move by DeadLetterReason, which starts with a
code the worker writes (worker redrive -dry-run lists them):
  poison       the message cannot be decoded or keyed (-reason poison moves
               it back once the consumer is fixed)
  key_reused   the idempotency key came before with another payload
  reconcile    the outcome is unknown: reconcile by hand
  permanent    the handler failed permanently for another reason
The runbook's rule is not to redrive key reuse or reconcile messages:
  worker redrive -exclude-reason key_reused -exclude-reason reconcile
With -dry-run they count what that move would take and leave.

With AMQP_URL (RabbitMQ) it moves the messages of AMQP_QUEUE's dead-letter
queue (<queue>.dlq) back to AMQP_QUEUE instead: each is published with
confirms, without the worker's DeadLetter* headers and the broker's x-death,
then acked; those it leaves are requeued in the dead-letter queue. A
message the broker dead-lettered itself (the queue's x-delivery-limit) has
the reason delivery_limit. It looks at most at the messages the dead-letter
queue held when it started. KAFKA_BROKERS (Kafka) is refused: it cannot move
Kafka's dead letters yet, and says how to.

`)
		s.fs.PrintDefaults()
	}
	if err := s.Parse(args); err != nil {
		return err
	}
	if err := redriveBroker(*queueURL, *rabbit.url, io.getenv); err != nil {
		return err
	}
	if *maxN < 0 {
		return usagef("redrive: -max %d: must not be negative", *maxN)
	}
	if *rabbit.url != "" {
		if *native || *moveUnkeyed {
			return usagef("redrive: -native and -move-unkeyed are SQS's: not with AMQP_URL")
		}
		o := redrive.Options{Max: *maxN, Reasons: reasons.match(), ExcludeReasons: excluded.match()}
		return rabbit.redrive(ctx, o, *dryRun, io)
	}
	if err := require(*queueURL, "queue-url", "QUEUE_URL"); err != nil {
		return err
	}
	if *native && *maxN > 0 && !*dryRun {
		return usagef("redrive: -max is not available with -native: SQS's move task moves every message")
	}
	if *native && len(reasons)+len(excluded) > 0 && !*dryRun {
		return usagef("redrive: -reason and -exclude-reason are not available with -native: SQS's move task moves every message")
	}
	cfg, err := loadAWS(ctx)
	if err != nil {
		return err
	}
	api := sqs.NewFromConfig(cfg)
	q, err := queue.Read(ctx, api, *queueURL)
	if err != nil {
		return fmt.Errorf("redrive: %w", err)
	}
	if q.DeadLetterURL == "" {
		return fmt.Errorf("redrive: queue %s has no redrive policy, so no dead-letter queue", *queueURL)
	}
	srcARN, err := queueARN(ctx, api, q.URL)
	if err != nil {
		return err
	}
	secret, err := orig.secret(ctx, cfg)
	if err != nil {
		return err
	}
	if secret == "" {
		fmt.Fprintln(io.stderr, "worker redrive: no ORIGINAL_ID_SECRET: no dead letter the worker sent can be verified, so none is moved without -move-unkeyed")
	}
	depth := approximateDepth(ctx, api, q.DeadLetterURL)
	prog := newProgress(io.stderr, depth)
	o := redrive.Options{Max: *maxN, Progress: prog.update, Reasons: reasons.match(), ExcludeReasons: excluded.match(), Depth: max(depth, 0),
		SourceARN: srcARN, Secret: secret, MoveUnkeyed: *moveUnkeyed}

	if *dryRun {
		c, err := redrive.Count(ctx, api, q.DeadLetterURL, o)
		prog.done()
		if err != nil {
			return fmt.Errorf("redrive: dry run: %w", err)
		}
		fmt.Fprintf(io.stdout, "dead-letter queue %s: %d messages (dry run: nothing moved)\n", q.DeadLetterURL, c.Total)
		printForeign(io.stdout, c.Foreign)
		if c.Unverified+c.Unkeyed > 0 {
			fmt.Fprintf(io.stdout, "%d whose %s does not verify, %d without %s (a move would leave them: see worker redrive -h)\n",
				c.Unverified, redrive.OriginalIDAttribute, c.Unkeyed, redrive.OriginalIDAttribute)
		}
		if len(reasons)+len(excluded) > 0 {
			fmt.Fprintf(io.stdout, "with -reason and -exclude-reason: would move %d messages, would leave %d for their reason\n", c.Selected, c.Filtered)
		}
		printReasons(io.stdout, c.ByReason)
		return nil
	}

	if *native {
		done, err := redriveNative(ctx, api, q, io, prog)
		if done || err != nil {
			return err
		}
	} else {
		fmt.Fprintln(io.stderr, "worker redrive: moving with the receive, send, delete loop (DeadLetterReason dropped, OriginalMessageId kept)")
	}
	r, err := redrive.Move(ctx, api, q.URL, q.DeadLetterURL, o)
	prog.done()
	fmt.Fprintf(io.stdout, "moved %d messages from %s to %s", r.Moved, q.DeadLetterURL, q.URL)
	if r.Left > 0 {
		fmt.Fprintf(io.stdout, "; left %d in the dead-letter queue (-reason, -exclude-reason)", r.Left)
	}
	fmt.Fprintln(io.stdout)
	printForeign(io.stdout, r.Foreign)
	printLeft(io.stdout, r.Unverified, "whose "+redrive.OriginalIDAttribute+" does not verify (sent to the dead-letter queue by someone other than the worker, "+
		"or signed with another ORIGINAL_ID_SECRET; never moved)")
	printLeft(io.stdout, r.Unkeyed, "without "+redrive.OriginalIDAttribute+" (moved, they would get new ids and a message_id key would change; "+
		"-move-unkeyed moves them)")
	if r.CameBack {
		fmt.Fprintln(io.stdout, "stopped: a message it moved was dead-lettered again while it ran; read its DeadLetterReason (worker redrive -dry-run) before moving it again")
	}
	switch {
	case errors.Is(err, context.Canceled):
		return errors.New("redrive: interrupted; the batch in flight was finished, the rest are still in the dead-letter queue: run it again to move them")
	case err != nil:
		return fmt.Errorf("redrive: %d failed: %w", r.Failed, err)
	}
	return nil
}

// printReasons lists the dead letters' counts by reason category, the
// most frequent first.
func printReasons(w io.Writer, byReason map[string]int) {
	for _, cat := range reasonCategories(byReason) {
		fmt.Fprintf(w, "%6d  %s\n", cat.count, cat.name)
		if cat.kinds > 1 {
			fmt.Fprintf(w, "        %d different reasons, e.g. %s\n", cat.kinds, cat.example)
		} else if cat.example != cat.name {
			fmt.Fprintf(w, "        %s\n", cat.example)
		}
	}
}

// printForeign names the queues other than the source whose messages SQS
// dead-lettered into the dead-letter queue: they are never moved.
func printForeign(w io.Writer, foreign map[string]int) {
	n := 0
	for _, c := range foreign {
		n += c
	}
	if n == 0 {
		return
	}
	fmt.Fprintf(w, "left %d from another queue (dead-lettered there by SQS; never moved to this queue), by source:\n", n)
	for _, src := range slices.Sorted(maps.Keys(foreign)) {
		fmt.Fprintf(w, "%6d  %s\n", foreign[src], src)
	}
}

// printLeft names the messages left in the dead-letter queue for why.
func printLeft(w io.Writer, ids []string, why string) {
	if len(ids) == 0 {
		return
	}
	fmt.Fprintf(w, "left %d %s:\n", len(ids), why)
	for _, id := range ids {
		fmt.Fprintf(w, "        %s\n", id)
	}
}

// redriveNative starts SQS's move task and waits for it; done is false when
// the endpoint has none and the loop should run instead.
func redriveNative(ctx context.Context, api *sqs.Client, q sqsworker.QueueInfo, io stdio, prog *progress) (done bool, err error) {
	dlqARN, err := queueARN(ctx, api, q.DeadLetterURL)
	if err != nil {
		return true, err
	}
	handle, err := redrive.StartNative(ctx, api, dlqARN)
	if errors.Is(err, redrive.ErrNativeUnsupported) {
		fmt.Fprintf(io.stderr, "worker redrive: %s; moving with the receive, send, delete loop instead\n", strings.TrimPrefix(err.Error(), "redrive: "))
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("redrive: %w", err)
	}
	fmt.Fprintf(io.stderr, "worker redrive: SQS move task %s started\n", handle)
	t, err := redrive.WaitNative(ctx, api, dlqARN, 2*time.Second, func(t redrive.Task) { prog.update(int(t.Moved)) })
	prog.done()
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(io.stdout, "stopped waiting; the move task goes on in SQS (cancel it with: aws sqs cancel-message-move-task --task-handle %s)\n", handle)
		return true, nil
	case err != nil:
		return true, fmt.Errorf("redrive: %w", err)
	case t.Status != "COMPLETED":
		return true, fmt.Errorf("redrive: move task %s: %s after %d messages: %s", handle, t.Status, t.Moved, t.Failure)
	}
	fmt.Fprintf(io.stdout, "moved %d messages from %s to %s (SQS move task)\n", t.Moved, q.DeadLetterURL, q.URL)
	return true, nil
}

func queueARN(ctx context.Context, api *sqs.Client, url string) (string, error) {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", fmt.Errorf("redrive: queue %s: %w", url, err)
	}
	return out.Attributes[string(types.QueueAttributeNameQueueArn)], nil
}

// approximateDepth is the dead-letter queue's approximate message count, or
// -1 if it cannot be read: for the progress line only.
func approximateDepth(ctx context.Context, api *sqs.Client, url string) int {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	if err != nil {
		return -1
	}
	return n
}

// progress rewrites one line on stderr, only when stderr is a terminal.
type progress struct {
	w     io.Writer // nil: not a terminal
	total int
	shown bool
}

func newProgress(stderr io.Writer, total int) *progress {
	if f, ok := stderr.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			return &progress{w: stderr, total: total}
		}
	}
	return &progress{}
}

func (p *progress) update(n int) {
	if p.w == nil {
		return
	}
	if p.total > 0 {
		fmt.Fprintf(p.w, "\r%d of about %d messages", n, p.total)
	} else {
		fmt.Fprintf(p.w, "\r%d messages", n)
	}
	p.shown = true
}

func (p *progress) done() {
	if p.shown {
		fmt.Fprintln(p.w)
		p.shown = false
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ", ") }

func (l *stringList) Set(v string) error {
	if v == "" {
		return errors.New("must not be empty")
	}
	*l = append(*l, v)
	return nil
}

// match is the list as redrive matches reasons: "none" stands for the
// messages without a DeadLetterReason.
func (l stringList) match() []string {
	out := make([]string, len(l))
	for i, v := range l {
		if v == "none" {
			v = redrive.NoReason
		}
		out[i] = v
	}
	return out
}

// reasonCategory is the dead-letter reasons that share a category: the
// text before the first ": " (what failed, before the detail of how).
type reasonCategory struct {
	name    string
	count   int    // messages
	kinds   int    // distinct reasons
	example string // the most frequent reason (the first in order on a tie)
}

// reasonCategories groups reasons by category, the most messages first.
func reasonCategories(byReason map[string]int) []reasonCategory {
	idx := map[string]int{}
	var cats []reasonCategory
	reasons := slices.Sorted(maps.Keys(byReason))
	for _, r := range reasons {
		name := r
		if r != redrive.NoReason { // its own words have a colon
			name, _, _ = strings.Cut(r, ": ")
		}
		i, ok := idx[name]
		if !ok {
			i = len(cats)
			idx[name] = i
			cats = append(cats, reasonCategory{name: name, example: r})
		}
		c := &cats[i]
		c.count += byReason[r]
		c.kinds++
		if byReason[r] > byReason[c.example] {
			c.example = r
		}
	}
	slices.SortStableFunc(cats, func(a, b reasonCategory) int { return b.count - a.count })
	return cats
}

// redriveBroker refuses a redrive on Kafka, which it cannot do yet, saying
// where the dead letters are and how to move them by hand, and a redrive
// with more than one broker named.
func redriveBroker(queueURL, amqpURL string, getenv func(string) string) error {
	kafka := getenv(kafkaChoice.env) != ""
	switch {
	case queueURL != "" && (kafka || amqpURL != ""), kafka && amqpURL != "":
		return usagef("redrive: more than one of QUEUE_URL, KAFKA_BROKERS and AMQP_URL is set: set the one whose dead letters to move")
	case kafka:
		return usagef("redrive: cannot move dead letters back on Kafka yet: they are records of the dead-letter topic (<topic>%s), "+
			"each with its reason, key and original topic, partition and offset in the headers %s, %s, %s, %s and %s; "+
			"produce the values of those to move back to the topic again (a payment already charged is replayed, not charged)",
			kafkaworker.DeadLetterSuffix, kafkaworker.HeaderReason, kafkaworker.HeaderKey, kafkaworker.HeaderTopic,
			kafkaworker.HeaderPartition, kafkaworker.HeaderOffset)
	}
	return nil
}
