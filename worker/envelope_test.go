package worker_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore/memory"
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

// The default decoder keys an enveloped message by its envelope's id (the
// SNS MessageId, the EventBridge event id), which every copy of one
// publication carries, rather than by the SQS id, which each copy has its
// own: SNS and EventBridge deliver at least once, and each delivery is a
// new SQS message.
func TestMessageIDKeysOfEnvelopes(t *testing.T) {
	t.Parallel()
	order := `{"order_id":"o-1","amount":5}`
	type delivery struct {
		id, body string
		attrs    map[string]string
	}
	for _, tc := range []struct {
		name       string
		keep       bool
		deliveries []delivery
		wantKeys   []string
		wantFails  int
	}{
		{name: "one SNS notification delivered twice", deliveries: []delivery{
			{id: "sqs-1", body: snsWrapped("sns-1", order)}, {id: "sqs-2", body: snsWrapped("sns-1", order)}},
			wantKeys: []string{"sns-1"}},
		{name: "one EventBridge event delivered twice", deliveries: []delivery{
			{id: "sqs-1", body: eventBridgeWrapped("eb-1", order)}, {id: "sqs-2", body: eventBridgeWrapped("eb-1", order)}},
			wantKeys: []string{"eb-1"}},
		{name: "an EventBridge event through SNS, twice", deliveries: []delivery{
			{id: "sqs-1", body: snsWrapped("sns-1", eventBridgeWrapped("eb-1", order))},
			{id: "sqs-2", body: snsWrapped("sns-2", eventBridgeWrapped("eb-1", order))}},
			wantKeys: []string{"eb-1"}},
		{name: "envelopes kept", keep: true, deliveries: []delivery{
			{id: "sqs-1", body: snsWrapped("sns-1", order)}, {id: "sqs-2", body: snsWrapped("sns-1", order)}},
			wantKeys: []string{"sns-1"}},
		// Two publications are two messages, whatever they hold: a
		// message-id key does not deduplicate a producer's retry.
		{name: "two publications", deliveries: []delivery{
			{id: "sqs-1", body: snsWrapped("sns-1", order)}, {id: "sqs-2", body: snsWrapped("sns-2", order)}},
			wantKeys: []string{"sns-1", "sns-2"}},
		// A copy the worker dead-lettered and that was moved back wears its
		// envelope still: it keeps the key its first delivery had.
		{name: "a redriven copy", deliveries: []delivery{
			{id: "sqs-1", body: snsWrapped("sns-1", order)},
			{id: "sqs-9", body: snsWrapped("sns-1", order), attrs: map[string]string{worker.OriginalIDAttribute: "sqs-1"}}},
			wantKeys: []string{"sns-1"}},
		{name: "no envelope", deliveries: []delivery{{id: "sqs-1", body: order}, {id: "sqs-2", body: order}},
			wantKeys: []string{"sqs-1", "sqs-2"}},
		// A body that wears a copied envelope id around another message is
		// a key reused, dead-lettered, not a duplicate acked unprocessed.
		{name: "another message under a known envelope id", deliveries: []delivery{
			{id: "sqs-1", body: snsWrapped("sns-1", order)}, {id: "sqs-2", body: snsWrapped("sns-1", `{"order_id":"o-2","amount":500}`)}},
			wantKeys: []string{"sns-1"}, wantFails: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			e := engine(t, worker.Protocol{
				Store: memory.New(memory.Config{}), Retention: time.Hour, Handler: rec,
				KeepEnvelopes: tc.keep, Logger: slog.New(slog.DiscardHandler),
			})
			fails := 0
			for _, d := range tc.deliveries {
				if !deliver(e, worker.Message{ID: d.id, Body: d.body, Attributes: d.attrs}) {
					fails++
				}
			}
			if fmt.Sprint(rec.keys) != fmt.Sprint(tc.wantKeys) || fails != tc.wantFails {
				t.Errorf("handled keys %q, %d failures; want %q, %d", rec.keys, fails, tc.wantKeys, tc.wantFails)
			}
		})
	}
}
