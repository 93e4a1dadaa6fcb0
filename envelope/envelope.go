package envelope

import (
	"encoding/json"
	"strings"
)

// Kind names an envelope.
type Kind string

// The envelopes Unwrap recognizes.
const (
	// SNS is an Amazon SNS notification delivered to SQS with raw message
	// delivery off: {"Type": "Notification", "MessageId", "TopicArn",
	// "Message": "...", "MessageAttributes": {...}, ...}. The inner message
	// is the "Message" string.
	SNS Kind = "sns"
	// EventBridge is an Amazon EventBridge event delivered to SQS by a
	// rule's target: {"version", "id", "detail-type", "source", "account",
	// "time", "region", "resources", "detail": {...}}. The inner message is
	// the "detail" value, as JSON.
	EventBridge Kind = "eventbridge"
)

// MaxDepth is how many envelopes Unwrap takes off one body (an EventBridge
// event published to SNS and delivered to SQS wears two).
const MaxDepth = 3

// Message is a body with its envelopes taken off.
type Message struct {
	// Body is the inner message.
	Body string
	// Kinds lists the envelopes taken off, outermost first; empty if the
	// body wore none.
	Kinds []Kind
	// ID is the innermost envelope's own id (the SNS MessageId, the
	// EventBridge event id): the same at every delivery of one publication.
	// Empty if the body wore none.
	ID string
	// Attributes are the SNS message attributes of type String and Number,
	// by name (the outermost envelope's win); nil if there were none.
	Attributes map[string]string
}

// Unwrapped reports whether any envelope was taken off.
func (m Message) Unwrapped() bool { return len(m.Kinds) > 0 }

// Unwrap takes the SNS and EventBridge envelopes off body, up to MaxDepth.
// A body that is not one of them, exactly as AWS writes it (the fields
// named on SNS and EventBridge, with the types AWS gives them), is returned
// unchanged: an application message that merely has a "Message" or a
// "detail" field is not mistaken for an envelope.
func Unwrap(body string) Message {
	m := Message{Body: body}
	for range MaxDepth {
		kind, id, inner, attrs, ok := unwrapOne(m.Body)
		if !ok {
			break
		}
		m.Body, m.ID = inner, id
		m.Kinds = append(m.Kinds, kind)
		for k, v := range attrs {
			if m.Attributes == nil {
				m.Attributes = map[string]string{}
			}
			if _, seen := m.Attributes[k]; !seen {
				m.Attributes[k] = v
			}
		}
	}
	return m
}

// snsNotification is an SNS notification's fields that matter here.
type snsNotification struct {
	Type              string                  `json:"Type"`
	MessageID         string                  `json:"MessageId"`
	TopicArn          string                  `json:"TopicArn"`
	Message           *string                 `json:"Message"`
	Timestamp         string                  `json:"Timestamp"`
	MessageAttributes map[string]snsAttribute `json:"MessageAttributes"`
}

type snsAttribute struct {
	Type  string `json:"Type"`
	Value string `json:"Value"`
}

// eventBridgeEvent is an EventBridge event's envelope fields. AWS also
// writes "account"; it is not required, as moto's SQS target leaves it out.
type eventBridgeEvent struct {
	Version    *string         `json:"version"`
	ID         string          `json:"id"`
	DetailType *string         `json:"detail-type"`
	Source     string          `json:"source"`
	Time       *string         `json:"time"`
	Region     *string         `json:"region"`
	Detail     json.RawMessage `json:"detail"`
}

func unwrapOne(body string) (kind Kind, id, inner string, attrs map[string]string, ok bool) {
	if !startsObject(body) || !mayNameEnvelopeKey(body) {
		return "", "", "", nil, false
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal([]byte(body), &probe) != nil {
		return "", "", "", nil, false
	}
	if _, isSNS := probe["TopicArn"]; isSNS {
		var n snsNotification
		if json.Unmarshal([]byte(body), &n) != nil || n.Type != "Notification" || n.MessageID == "" ||
			n.TopicArn == "" || n.Message == nil || n.Timestamp == "" {
			return "", "", "", nil, false
		}
		for k, a := range n.MessageAttributes {
			if a.Type == "String" || a.Type == "Number" {
				if attrs == nil {
					attrs = map[string]string{}
				}
				attrs[k] = a.Value
			}
		}
		return SNS, n.MessageID, *n.Message, attrs, true
	}
	if _, isEB := probe["detail-type"]; isEB {
		var e eventBridgeEvent
		if json.Unmarshal([]byte(body), &e) != nil || e.Version == nil || e.ID == "" || e.DetailType == nil ||
			e.Source == "" || e.Time == nil || e.Region == nil || len(e.Detail) == 0 {
			return "", "", "", nil, false
		}
		return EventBridge, e.ID, string(e.Detail), nil, true
	}
	return "", "", "", nil, false
}

// mayNameEnvelopeKey reports whether body can hold the key that marks an
// envelope ("TopicArn" or "detail-type"): written plainly it is in the
// text; written with escapes, the text has a backslash. A body with
// neither is no envelope, and is not parsed to find out: most bodies are
// not envelopes, and every message asks.
func mayNameEnvelopeKey(body string) bool {
	return strings.Contains(body, "TopicArn") || strings.Contains(body, "detail-type") || strings.IndexByte(body, '\\') >= 0
}

// startsObject reports whether body's first non-space byte opens an object.
func startsObject(body string) bool {
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		default:
			return false
		}
	}
	return false
}

// Path names the envelopes taken off, innermost first, for a log field:
// "sns", "eventbridge+sns" (an event published to SNS); "" for none.
func (m Message) Path() string {
	s := ""
	for i := len(m.Kinds) - 1; i >= 0; i-- {
		if s != "" {
			s += "+"
		}
		s += string(m.Kinds[i])
	}
	return s
}
