package worker

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/claimfirst/claimfirst/envelope"
)

// UnwrapEnvelopes returns a Decoder that takes the SNS and EventBridge
// envelopes off a message's body (see package envelope) before d decodes
// it: m.Body becomes the message that was published, m.Envelope names what
// was taken off, m.EnvelopeID is the innermost envelope's id,
// m.DeliveredBody keeps the body as it arrived, and an SNS notification's String and Number message
// attributes are added to m.Attributes where the SQS message has none of
// that name, except the worker's own (OriginalIDAttribute,
// ReasonAttribute, FirstReceivedAttribute): nothing signs an envelope for
// the worker, so whoever can publish to the topic, or write a body to the
// queue, could otherwise choose another message's original id, and so its
// key. Those are dropped without a word. A body in no envelope reaches d
// unchanged. The worker and the
// Lambda adapter wrap their Decoder in it unless KeepEnvelopes is set.
func UnwrapEnvelopes(d Decoder) Decoder {
	if u, ok := d.(unwrapping); ok {
		return u
	}
	return unwrapping{d: d}
}

type unwrapping struct{ d Decoder }

// Decode unwraps m's body once, then calls the wrapped Decoder.
func (u unwrapping) Decode(m *Message) error {
	if m.Envelope == "" {
		if e := envelope.Unwrap(m.Body); e.Unwrapped() {
			m.DeliveredBody = m.Body
			m.Body, m.Envelope, m.EnvelopeID = e.Body, e.Path(), e.ID
			for k, v := range e.Attributes {
				if _, ok := m.Attributes[k]; ok || ownAttribute(k) {
					continue
				}
				if m.Attributes == nil {
					m.Attributes = map[string]string{}
				}
				m.Attributes[k] = v
			}
		}
	}
	return u.d.Decode(m)
}

// ownAttribute reports whether name is an attribute only the worker
// writes (on the SQS message itself, when it dead-letters one).
func ownAttribute(name string) bool {
	switch name {
	case OriginalIDAttribute, ReasonAttribute, FirstReceivedAttribute:
		return true
	}
	return false
}

// PublishedID returns the id m was published with: the envelope's id
// (Message.EnvelopeID, or read from the body when envelopes are kept) if m
// came in an SNS notification or EventBridge event, which every copy of
// one publication carries; else Message.OriginalID. The envelope's id
// comes first because the worker dead-letters, and redrive moves back, the
// body as it arrived: a redriven copy still wears its envelope, and keeps
// the id of its first delivery by it.
func (m *Message) PublishedID() string {
	if id, _ := m.envelope(); id != "" {
		return id
	}
	return m.OriginalID()
}

// envelope returns the id of the innermost envelope m came in, taken off or
// kept, and the message inside it; "" if it came in none.
func (m *Message) envelope() (id, inner string) {
	if m.Envelope != "" {
		return m.EnvelopeID, m.Body
	}
	if e := envelope.Unwrap(m.Body); e.Unwrapped() {
		return e.ID, e.Body
	}
	return "", ""
}

// messageIDKey is KeyFromMessageID's key and fingerprint for m: its
// PublishedID, with a hash of the message inside the envelope as the
// fingerprint if it came in one, so that a body that copies a known
// envelope id around another message is a key reused, not a duplicate.
func messageIDKey(m *Message) (key, fingerprint string) {
	id, inner := m.envelope()
	if id == "" {
		return m.OriginalID(), ""
	}
	sum := sha256.Sum256([]byte(inner))
	return id, "sha256:" + hex.EncodeToString(sum[:16])
}
