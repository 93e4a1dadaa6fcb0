// Package sqsworker is the SQS transport of package worker's protocol:
// a Worker long-polls a queue (in a container), a Lambda handles SQS
// events delivered by an event source mapping. Both hand every message to
// worker.Engine and carry out its disposition: an ack deletes the message
// (a Worker batches deletes; a Lambda leaves it out of its partial batch
// response), a retry or a deferral sets its visibility, a dead letter
// copies it to the queue's dead-letter queue with the reason
// (worker.ReasonAttribute) and deletes it. The claim's lease is aligned
// with the message's visibility (in Lambda, with the invocation's
// deadline), and a heartbeat extends both.
//
//	w, err := sqsworker.New(ctx, sqsworker.Config{
//		QueueURL: url, SQS: sqs.NewFromConfig(cfg),
//		Protocol: worker.Protocol{Store: store, Handler: h},
//	})
//
// Completed keys are remembered for Config.Retention, which defaults to
// the queue's retention plus its dead-letter queue's plus a day
// (DefaultRetention), and may not be set below MinRetention (the queue's
// retention, plus the longest wait before a claim, plus twice the clock
// bound): a redelivery that arrives after its claim is forgotten would be
// processed as new.
//
// Run stops receiving when its context ends (cutting a long poll short),
// returns messages it has not started to the queue at once, and waits for
// the rest; it returns within ShutdownTimeout of its context's end,
// cancelling handlers still running when all but a quarter of it (at most
// 5s) has passed. A message a cut-short long poll took is neither
// processed nor lost: it becomes visible again when its visibility
// timeout ends.
//
// The clock check (worker.ClockCheck) is fed with the Date of every SQS
// answer; an X-Ray trace header SQS carries (AWSTraceHeader) is the
// message span's parent when no traceparent attribute says otherwise.
//
// # FIFO queues
//
// A FIFO queue (its FifoQueue attribute, or a Lambda event source ARN ending
// in ".fifo") is processed one message group at a time: the messages of a
// MessageGroupId run one after another in the order SQS gave them, different
// groups in parallel, and a message that is not done holds back its group's
// later messages. The rules (what holds a group and for how long, how poison
// leaves it, the queue's maxReceiveCount, what Lambda reports) are written
// once, in the repository's docs/protocol.md, "FIFO queues".
//
// # Metrics
//
// Worker.HTTPHandler serves the metrics (worker.HTTPHandler) with
// /healthz and /readyz. A Lambda writes its outcome counts as one
// CloudWatch Embedded Metric Format line per invocation to LambdaConfig.EMF
// (stdout).
package sqsworker
