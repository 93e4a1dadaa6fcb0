package worker

import (
	"github.com/claimfirst/claimfirst/envelope"
)

// UnwrapEnvelopes returns a Decoder that takes the SNS and EventBridge
// envelopes off a message's body (see package envelope) before d decodes
// it: m.Body becomes the message that was published, m.Envelope names what
// was taken off, and an SNS notification's String and Number message
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
			m.Body, m.Envelope = e.Body, e.Path()
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
