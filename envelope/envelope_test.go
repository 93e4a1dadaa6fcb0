package envelope_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/claimfirst/claimfirst/envelope"
)

// snsBody is an SNS notification as SQS receives it with raw message
// delivery off, in the shape AWS documents ("Fanout to Amazon SQS queues").
const snsBody = `{
  "Type" : "Notification",
  "MessageId" : "63a3f6b6-d533-4a47-aef9-fcf5cf758c76",
  "TopicArn" : "arn:aws:sns:us-west-2:123456789012:MyTopic",
  "Subject" : "Testing publish to subscribed queues",
  "Message" : "{\"payment_id\":\"pay_123\",\"amount\":1999,\"currency\":\"EUR\"}",
  "Timestamp" : "2012-03-29T05:12:16.901Z",
  "SignatureVersion" : "1",
  "Signature" : "EXAMPLEnTrFPa3...",
  "SigningCertURL" : "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem",
  "UnsubscribeURL" : "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=arn:aws:sns:us-west-2:123456789012:MyTopic:c7fe3a54-ab0e-4ec2-88e0-db410a0f2bee",
  "MessageAttributes" : {
    "Idempotency-Key" : {"Type":"String","Value":"k-1"},
    "Priority" : {"Type":"Number","Value":"3"},
    "Blob" : {"Type":"Binary","Value":"AQID"}
  }
}`

// eventBridgeBody is an EventBridge event as a rule's SQS target receives
// it, in the shape AWS documents ("Amazon EventBridge events").
const eventBridgeBody = `{
  "version": "0",
  "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
  "detail-type": "Payment Requested",
  "source": "com.example.payments",
  "account": "111122223333",
  "time": "2017-12-22T18:43:48Z",
  "region": "us-west-1",
  "resources": [],
  "detail": {"payment_id": "pay_456", "amount": 500, "currency": "USD"}
}`

const payment = `{"payment_id":"pay_123","amount":1999,"currency":"EUR"}`

func TestUnwrap(t *testing.T) {
	t.Parallel()
	// An EventBridge event published to SNS, delivered to SQS: two envelopes.
	twice := `{"Type":"Notification","MessageId":"m-2","TopicArn":"arn:aws:sns:eu-west-1:111122223333:t",` +
		`"Message":` + quote(eventBridgeBody) + `,"Timestamp":"2026-12-04T10:00:00.000Z"}`
	for _, tc := range []struct {
		name, body, want, id, path string
		attrs                      map[string]string
	}{
		{name: "sns", body: snsBody, want: payment, id: "63a3f6b6-d533-4a47-aef9-fcf5cf758c76", path: "sns",
			attrs: map[string]string{"Idempotency-Key": "k-1", "Priority": "3"}},
		{name: "eventbridge", body: eventBridgeBody, want: `{"payment_id": "pay_456", "amount": 500, "currency": "USD"}`,
			id: "6a7e8feb-b491-4cf7-a9f1-bf3703467718", path: "eventbridge"},
		{name: "eventbridge in sns", body: twice, want: `{"payment_id": "pay_456", "amount": 500, "currency": "USD"}`,
			id: "6a7e8feb-b491-4cf7-a9f1-bf3703467718", path: "eventbridge+sns"},
		{name: "plain", body: payment, want: payment},
		{name: "not json", body: "hello", want: "hello"},
		{name: "list", body: `[1,2]`, want: `[1,2]`},
		{name: "has a Message field but is no notification", body: `{"Message":"x","TopicArn":"t"}`, want: `{"Message":"x","TopicArn":"t"}`},
		{name: "notification without a Message", body: `{"Type":"Notification","MessageId":"m","TopicArn":"t","Timestamp":"2026-01-01T00:00:00Z"}`,
			want: `{"Type":"Notification","MessageId":"m","TopicArn":"t","Timestamp":"2026-01-01T00:00:00Z"}`},
		{name: "subscription confirmation", body: `{"Type":"SubscriptionConfirmation","MessageId":"m","TopicArn":"t","Message":"x","Timestamp":"2026-01-01T00:00:00Z"}`,
			want: `{"Type":"SubscriptionConfirmation","MessageId":"m","TopicArn":"t","Message":"x","Timestamp":"2026-01-01T00:00:00Z"}`},
		// moto's EventBridge-to-SQS delivery leaves out "account".
		{name: "eventbridge without account", body: `{"id":"e-1","time":"2026-12-04T10:00:00Z","version":"0","detail-type":"x","source":"s","region":"eu-west-1","resources":[],"detail":{"a":1}}`,
			want: `{"a":1}`, id: "e-1", path: "eventbridge"},
		{name: "has detail-type but is no event", body: `{"detail-type":"x","detail":{}}`, want: `{"detail-type":"x","detail":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := envelope.Unwrap(tc.body)
			if m.Body != tc.want || m.ID != tc.id || m.Path() != tc.path || m.Unwrapped() != (tc.path != "") {
				t.Errorf("Unwrap = body %q id %q path %q; want %q, %q, %q", m.Body, m.ID, m.Path(), tc.want, tc.id, tc.path)
			}
			if !reflect.DeepEqual(m.Attributes, tc.attrs) {
				t.Errorf("attributes = %v, want %v", m.Attributes, tc.attrs)
			}
		})
	}
}

func quote(s string) string {
	b := []byte{'"'}
	for _, r := range s {
		switch r {
		case '"', '\\':
			b = append(b, '\\', byte(r))
		case '\n':
			b = append(b, '\\', 'n')
		default:
			b = append(b, string(r)...)
		}
	}
	return string(append(b, '"'))
}

func FuzzUnwrap(f *testing.F) {
	f.Add(snsBody)
	f.Add(eventBridgeBody)
	f.Add(payment)
	f.Fuzz(func(t *testing.T, body string) {
		m := envelope.Unwrap(body)
		if !m.Unwrapped() && m.Body != body {
			t.Fatalf("body changed without an envelope: %q -> %q", body, m.Body)
		}
	})
}

// TestEscapedKeysStillUnwrap: an envelope whose marking key is written
// with escapes ("\u0054opicArn") is still an envelope: the check that
// spares most bodies a parse looks for a backslash as well as the plain
// key, so it never turns an envelope away.
func TestEscapedKeysStillUnwrap(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"sns":         strings.Replace(snsBody, `"TopicArn"`, `"\u0054opicArn"`, 1),
		"eventbridge": strings.Replace(eventBridgeBody, `"detail-type"`, `"detail\u002dtype"`, 1),
	} {
		plain := map[string]string{"sns": snsBody, "eventbridge": eventBridgeBody}[name]
		if got, want := envelope.Unwrap(body), envelope.Unwrap(plain); !want.Unwrapped() || !reflect.DeepEqual(got, want) {
			t.Errorf("%s with an escaped key: %+v, want %+v", name, got, want)
		}
	}
}

// BenchmarkUnwrapPlain is the cost of asking whether a body that is no
// envelope is one: every message without KeepEnvelopes asks.
func BenchmarkUnwrapPlain(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if envelope.Unwrap(payment).Unwrapped() {
			b.Fatal("a payment unwrapped")
		}
	}
}
