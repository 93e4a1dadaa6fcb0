package worker

import (
	"fmt"

	"github.com/claimfirst/claimfirst/keyexpr"
)

// KeyFromJMESPath returns a Decoder that parses a message's body as JSON
// (m.Payload becomes the decoded value: maps, slices, float64, string, bool)
// and takes its key, and its fingerprint if c.Fingerprint is set, from the
// JMESPath expressions in c (see package keyexpr; Powertools'
// event_key_jmespath and payload_validation_jmespath).
//
// What an expression searches: the message as published. The worker takes
// SNS and EventBridge envelopes off first (unless KeepEnvelopes is set), so
// "id" on an EventBridge event is the "id" in its detail, not the event's.
// An expression that starts with $body (keyexpr.BodyRoot) searches the
// body as SQS delivered it, envelopes and all, whether or not they were
// taken off: "$body.id" is the event's own id, "$body.MessageId" an SNS
// notification's; for a message that came in no envelope the two are one.
//
// A body that is not JSON, or in which the key expression finds nothing or
// an empty value, is poison, with a reason naming the expression. Errors
// from New: c's expressions do not compile (wrapping ErrConfig).
func KeyFromJMESPath(c keyexpr.Config) (Decoder, error) {
	e, err := keyexpr.New(c)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return jmespathDecoder{expr: e}, nil
}

// jmespathDecoder is the Decoder KeyFromJMESPath returns.
type jmespathDecoder struct {
	expr *keyexpr.Expr // finds the key and fingerprint
}

// Decode implements Decoder.
func (d jmespathDecoder) Decode(m *Message) error {
	var doc any
	x, err := d.expr.ExtractInput(KeyInput(m), &doc)
	if err != nil {
		return Permanent("no idempotency key", err)
	}
	m.Payload, m.Key, m.Fingerprint = doc, x.Key, x.Fingerprint
	return nil
}

// KeyInput is what a key expression searches in m: its body, and the body
// as delivered (keyexpr.BodyRoot) if it came in an envelope.
func KeyInput(m *Message) keyexpr.Input {
	return keyexpr.Input{Payload: []byte(m.Body), Body: []byte(m.DeliveredBody)}
}
