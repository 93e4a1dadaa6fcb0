package worker_test

import (
	"strings"
	"testing"

	"github.com/claimfirst/claimfirst/worker"
)

// snsWithAttributes is an SNS notification of order whose message
// attributes are attrs (a JSON object of {"Type","Value"}), as anyone who
// can publish to the topic, or write a body to the queue, can send it.
func snsWithAttributes(snsID, order, attrs string) string {
	return strings.TrimSuffix(snsWrapped(snsID, order), "}") + `,"MessageAttributes":` + attrs + `}`
}

// The worker's own attributes are never taken from an envelope: an SNS
// envelope is not signed for the worker, so a producer who controls only a
// body would otherwise choose another message's original id (and so its
// key), or a dead-letter reason.
func TestEnvelopeAttributesNeverTheWorkers(t *testing.T) {
	t.Parallel()
	body := snsWithAttributes("sns-1", `{"order_id":"o-1"}`, `{`+
		`"OriginalMessageId":{"Type":"String","Value":"victim-id"},`+
		`"DeadLetterReason":{"Type":"String","Value":"reconcile"},`+
		`"FirstReceivedAt":{"Type":"String","Value":"2020-01-01T00:00:00Z"},`+
		`"Idempotency-Key":{"Type":"String","Value":"k-1"}}`)
	var got *worker.Message
	dec := worker.UnwrapEnvelopes(worker.DecoderFunc(func(m *worker.Message) error {
		got = m
		m.Key = m.ID
		return nil
	}))
	m := &worker.Message{ID: "sqs-1", Body: body}
	if err := dec.Decode(m); err != nil {
		t.Fatal(err)
	}
	if id := got.OriginalID(); id != "sqs-1" {
		t.Errorf("OriginalID() = %q after an SNS envelope claimed another; want the SQS id", id)
	}
	for _, name := range []string{worker.OriginalIDAttribute, worker.ReasonAttribute, worker.FirstReceivedAttribute} {
		if v, ok := got.Attributes[name]; ok {
			t.Errorf("attribute %s = %q taken from the envelope", name, v)
		}
	}
	if got.Attributes["Idempotency-Key"] != "k-1" {
		t.Errorf("attributes = %v; want the envelope's own Idempotency-Key", got.Attributes)
	}
}
