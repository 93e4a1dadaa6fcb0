package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/claimfirst/claimfirst/internal/setting"
	"github.com/claimfirst/claimfirst/once"
	"github.com/claimfirst/claimfirst/origin"
)

// Message is one delivery of a message as the decoder and the handler see
// it: the same for every transport.
type Message struct {
	// ID is the broker's message id (each delivery of one message has the
	// same id; a producer's retry is a new message with a new id).
	ID string
	// Body is the raw message body.
	Body string
	// Attributes holds the message attributes with string or number values.
	Attributes map[string]string
	// Attempt is which delivery of the message this is: 1 at the first (SQS:
	// its ApproximateReceiveCount).
	Attempt int
	// FirstReceived is when the broker first delivered the message (SQS:
	// its ApproximateFirstReceiveTimestamp); zero if the broker does not say.
	FirstReceived time.Time
	// Redelivered hints that the message was delivered before (Attempt > 1
	// on SQS). A hint: a first delivery may also be a producer's retry.
	Redelivered bool
	// Native is the broker's own record of the delivery, reachable for
	// those who need it: *types.Message (package
	// github.com/aws/aws-sdk-go-v2/service/sqs/types) from the long-poll
	// transport, *events.SQSMessage (github.com/aws/aws-lambda-go/events)
	// from the Lambda adapter; nil where there is none.
	Native any

	// Envelope names the envelopes the body was taken out of before
	// decoding ("sns", "eventbridge", "eventbridge+sns"; see
	// UnwrapEnvelopes), or "" if it arrived as published.
	Envelope string
	// EnvelopeID is the innermost envelope's own id (the SNS MessageId, the
	// EventBridge event id): the same in every copy of one publication,
	// which SNS and EventBridge may deliver more than once. "" if Envelope
	// is "".
	EnvelopeID string
	// DeliveredBody is the body as SQS delivered it, envelopes and all, if
	// Envelope is not "" (Body is then the message inside); "" otherwise.
	DeliveredBody string

	// Payload is what the Decoder made of Body, for the handler.
	Payload any
	// Key is the idempotency key the Decoder chose; the claim is on it.
	Key string
	// Fingerprint says what the payload is, for the claim: the same key with
	// another fingerprint is key reuse, dead-lettered, not a duplicate. The
	// Decoder may set it (e.g. a hash of the fields that matter); empty
	// matches anything.
	Fingerprint string
	// Token is the claim's fencing token while the handler runs: pass it
	// downstream where a resource can reject writes from a superseded holder.
	Token int64
	// FirstAt is when the key was first acquired, by any delivery: when a
	// downstream service first may have seen it. Handlers that forward the
	// key to a service that forgets keys compare it with that service's
	// memory. Zero for claims stored before it was recorded.
	FirstAt time.Time

	tx *Tx // what the handler committed with the completion (Commit)
	// originalID is the id OriginalIDAttribute vouches for, once the
	// protocol verified its MAC (Protocol.OriginalIDSecret); "" otherwise.
	originalID string
}

// OriginalID returns the id the message first arrived with: that of a
// message the worker dead-lettered and `worker redrive` moved back since,
// as its OriginalIDAttribute says when the attribute's MAC verifies with
// Protocol.OriginalIDSecret (see package origin); else its SQS message id.
// An attribute set by anyone else (a producer choosing another message's
// key) is not believed, nor any without a secret.
func (m *Message) OriginalID() string {
	if m.originalID != "" {
		return m.originalID
	}
	return m.ID
}

// Handler does a message's work while the worker holds its claim. It is
// called at most once at a time per key across all workers sharing the claim
// table, and its context ends when the lease is lost, at shutdown's deadline,
// or at SQS's 12-hour limit.
//
// The returned result is stored with the completed claim and given to
// duplicates' logs. A nil error completes the claim and acks the message. An
// error made with Permanent dead-letters the message; any other error
// releases the claim and lets SQS redeliver the message after a backoff.
type Handler interface {
	Handle(ctx context.Context, m *Message) (result string, err error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m *Message) (string, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m *Message) (string, error) { return f(ctx, m) }

// Decoder decodes and validates a message before it is claimed: it sets
// m.Payload and m.Key, and may set m.Fingerprint. An error means the message is poison (it can never
// succeed) and sends it to the dead-letter queue with the error as the reason.
type Decoder interface {
	Decode(m *Message) error
}

// DecoderFunc adapts a function to Decoder.
type DecoderFunc func(m *Message) error

// Decode calls f.
func (f DecoderFunc) Decode(m *Message) error { return f(m) }

// KeyFromMessageID is a Decoder that keys each message by the id it was
// published with (Message.PublishedID) and leaves the body undecoded: an
// SNS notification or EventBridge event by its envelope's id, with a
// fingerprint of the message inside; any other message by the id it first
// arrived with (Message.OriginalID). It deduplicates redeliveries of one
// message, the copies SNS and EventBridge deliver of one publication, and
// a message the worker dead-lettered and `worker redrive` (package
// redrive) moved back, which carries its envelope or OriginalIDAttribute.
// It does not deduplicate a producer's retry, which is a new message (a
// new publication), nor a message with no envelope moved by SQS's own move
// task or the console, which get a new id and no OriginalIDAttribute:
// prefer a business key.
var KeyFromMessageID Decoder = DecoderFunc(func(m *Message) error {
	m.Key, m.Fingerprint = messageIDKey(m)
	m.Payload = m.Body
	return nil
})

// The codes a dead-letter reason starts with, then ": " and the detail
// ("key_reused: idempotency key \"pay_0\" reused with another payload
// ..."): stable words an operator filters dead letters by (`worker redrive
// -reason poison`, `-exclude-reason key_reused`).
const (
	// CodePoison: the message cannot be decoded or keyed; a redrive brings
	// it back unchanged, to be dead-lettered again.
	CodePoison = "poison"
	// CodeKeyReused: the idempotency key was used before for another
	// payload (the claim's fingerprint, or the downstream service, says so).
	// Never redriven: it would be dead-lettered again.
	CodeKeyReused = "key_reused"
	// CodeReconcile: the effect's outcome is unknown and cannot be found
	// out safely (a payment retried past the provider's key lifetime):
	// reconcile by hand, never redriven blindly.
	CodeReconcile = "reconcile"
	// CodePermanent: the handler failed permanently for another reason
	// (a PermanentError without a Code).
	CodePermanent = "permanent"
)

// PermanentError is a failure that retrying cannot fix: the message goes to
// the dead-letter queue with Code and Reason attached.
type PermanentError struct {
	// Reason says why, in a form fit for a message attribute and a log line.
	Reason string
	// Err is the underlying error, if any.
	Err error
	// Code starts the dead-letter reason: one of the Code constants or the
	// handler's own stable word. Defaults to CodePermanent from a handler,
	// CodePoison from a decoder.
	Code string
}

// Error implements error.
func (e *PermanentError) Error() string {
	return "permanent: " + e.text()
}

// text is the reason and the cause's detail, the reason said once, as
// once.PermanentError.Text says it.
func (e *PermanentError) text() string { return e.marked().Text() }

// marked is e as once marks a permanent failure.
func (e *PermanentError) marked() *once.PermanentError {
	return &once.PermanentError{Reason: e.Reason, Err: e.Err}
}

// Unwrap returns e marked as once marks a permanent failure (a
// *once.PermanentError with the same Reason and Err): one notion of
// permanent, so once.IsPermanent holds for it too.
func (e *PermanentError) Unwrap() error { return e.marked() }

// Permanent returns an error that dead-letters the message with reason and
// the underlying error err (either may be empty): the same shape as
// once.Permanent, worker.Permanent("card declined", err).
func Permanent(reason string, err error) error {
	return &PermanentError{Reason: reason, Err: err}
}

// Permanentf returns a PermanentError with a formatted reason.
func Permanentf(format string, args ...any) error {
	return &PermanentError{Reason: fmt.Sprintf(format, args...)}
}

// IsPermanent reports whether err is or wraps a PermanentError, or
// once's: it is once.IsPermanent, one notion of permanent for both.
func IsPermanent(err error) bool { return once.IsPermanent(err) }

// reason returns the dead-letter reason of err: its code (code unless err
// carries its own), ": ", and what happened.
func reason(err error, code string) string {
	text := err.Error()
	var pe *PermanentError
	var ope *once.PermanentError
	switch {
	case errors.As(err, &pe):
		text = pe.text()
		if pe.Code != "" {
			code = pe.Code
		}
	case errors.As(err, &ope):
		text = ope.Text()
	}
	if strings.HasPrefix(text, code+": ") {
		return text
	}
	return code + ": " + text
}

// ErrConfig marks a configuration the worker refuses to start with; the
// binary exits with status 2 on it.
var ErrConfig = setting.ErrConfig

// ErrShutdownTimeout is returned by a transport's Run when in-flight work
// had not ended within its shutdown timeout of its context's end, even
// after cancellation.
var ErrShutdownTimeout = errors.New("worker: shutdown timeout: handlers still running")

// The message attributes a transport adds to a message it dead-letters,
// and that the protocol reads back (OriginalID) when a dead letter is
// moved back to its queue (package redrive).
const (
	// ReasonAttribute carries the reason the message was dead-lettered.
	ReasonAttribute = "DeadLetterReason"
	// OriginalIDAttribute carries the broker's message id of the message
	// as it first arrived, with a MAC ("<id>.<mac>", see package origin).
	// SQS gives a moved or redriven message a new id; a key taken from the
	// message id uses this one when its MAC verifies, so a redriven
	// message keeps its key. Written only with Protocol.OriginalIDSecret;
	// kept, not overwritten, when a redriven message is dead-lettered
	// again; replaced when it does not verify.
	OriginalIDAttribute = "OriginalMessageId"
	// FirstReceivedAttribute carries when the message was first received
	// (RFC 3339, from Message.FirstReceived: SQS's
	// ApproximateFirstReceiveTimestamp), kept like OriginalIDAttribute.
	FirstReceivedAttribute = "FirstReceivedAt"
)

// verifyOrigin believes m's OriginalIDAttribute if its MAC verifies with
// secret over the body as delivered and m's FirstReceivedAttribute, and
// logs a WARN naming the message when it carries one that does not (a
// producer's forgery, a value signed with another secret, or any value
// without a secret). Called once per delivery, before the body is
// unwrapped or decoded.
func verifyOrigin(m *Message, secret origin.Secret, log *slog.Logger) {
	v, ok := m.Attributes[OriginalIDAttribute]
	if !ok {
		return
	}
	if id, ok := origin.Verify(secret, v, m.Attributes[FirstReceivedAttribute], m.Body); ok {
		m.originalID = id
		return
	}
	why := "its MAC does not verify"
	if secret == "" {
		why = "no original-id secret is set"
	}
	log.Warn("ignoring the message's "+OriginalIDAttribute+" attribute: "+why+"; keyed by its own id", slog.String("reason", why))
}
