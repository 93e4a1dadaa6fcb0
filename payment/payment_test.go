package payment_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/payment"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
	"github.com/claimfirst/claimfirst/worker"
)

const body = `{"payment_id":"pay_1","amount":1999,"currency":"EUR"}`

func TestDecoderKeySources(t *testing.T) {
	t.Parallel()
	cases := []struct {
		from      string
		attrs     map[string]string
		body      string
		wantKey   string
		permanent bool
	}{
		{from: "", body: body, wantKey: "pay_1"},
		{from: "payment_id", body: body, wantKey: "pay_1"},
		{from: "message_id", body: body, wantKey: "msg-1"},
		// Believed only once the worker verified its MAC (worker.Protocol.OriginalIDSecret).
		{from: "message_id", attrs: map[string]string{worker.OriginalIDAttribute: "msg-0"}, body: body, wantKey: "msg-1"},
		{from: "attribute:Idem", attrs: map[string]string{"Idem": "order-7"}, body: body, wantKey: "order-7"},
		{from: "attribute:Idem", body: body, permanent: true},
		{from: "attribute:Idem", attrs: map[string]string{"Idem": strings.Repeat("k", 256)}, body: body, permanent: true},
		{from: "payment_id", body: `{"payment_id":"pay_1","amount":19.99,"currency":"EUR"}`, permanent: true},
		{from: "payment_id", body: `not json`, permanent: true},
		{from: "jmespath:payment_id", body: body, wantKey: "pay_1"},
		{from: "jmespath:join(':', [currency, payment_id])", body: body, wantKey: "EUR:pay_1"},
		{from: "jmespath:order_id", body: body, permanent: true},
	}
	for _, tc := range cases {
		src, err := payment.ParseKeySource(tc.from)
		if err != nil {
			t.Fatalf("ParseKeySource(%q): %v", tc.from, err)
		}
		m := &worker.Message{ID: "msg-1", Body: tc.body, Attributes: tc.attrs}
		err = (&payment.Decoder{KeyFrom: src}).Decode(m)
		if tc.permanent {
			if !worker.IsPermanent(err) {
				t.Errorf("%s %.30q: err = %v, want a permanent error", tc.from, tc.body, err)
			}
			continue
		}
		if err != nil || m.Key != tc.wantKey {
			t.Errorf("%s: key %q err %v, want %q", tc.from, m.Key, err, tc.wantKey)
		}
		if p, ok := m.Payload.(provider.Payment); !ok || p.Amount != 1999 {
			t.Errorf("%s: payload %#v", tc.from, m.Payload)
		}
	}
	// A message-id key of a payment published to SNS is the notification's
	// id, which every copy SNS delivers of it carries.
	sns := `{"Type":"Notification","MessageId":"sns-1","TopicArn":"arn:aws:sns:eu-west-1:111122223333:payments",` +
		`"Message":` + strconv.Quote(body) + `,"Timestamp":"2026-12-04T10:00:00.000Z"}`
	for _, id := range []string{"msg-1", "msg-2"} {
		m := &worker.Message{ID: id, Body: sns}
		if err := worker.UnwrapEnvelopes(&payment.Decoder{KeyFrom: payment.KeyMessageID}).Decode(m); err != nil || m.Key != "sns-1" {
			t.Errorf("message_id of SNS copy %s: key %q err %v, want the notification's id sns-1", id, m.Key, err)
		}
	}
	// A key expression that starts with $body searches the body as
	// delivered: here the EventBridge event's own id.
	event := `{"version":"0","id":"ev-1","detail-type":"Payment Requested","source":"shop","time":"2026-12-04T10:00:00Z",` +
		`"region":"eu-west-1","resources":[],"detail":` + body + `}`
	for from, want := range map[string]string{"jmespath:$body.id": "ev-1", "jmespath:payment_id": "pay_1"} {
		src, err := payment.ParseKeySource(from)
		if err != nil {
			t.Fatal(err)
		}
		m := &worker.Message{ID: "msg-1", Body: event}
		if err := worker.UnwrapEnvelopes(&payment.Decoder{KeyFrom: src}).Decode(m); err != nil || m.Key != want {
			t.Errorf("%s on an EventBridge event: key %q err %v, want %q", from, m.Key, err, want)
		}
	}
	d, err := payment.NewDecoder("jmespath:payment_id")
	if err != nil || d.KeyExpr == nil {
		t.Fatalf("NewDecoder = %+v, %v; want the expression compiled", d, err)
	}
	if m := (&worker.Message{ID: "msg-1", Body: body}); d.Decode(m) != nil || m.Key != "pay_1" {
		t.Errorf("NewDecoder's Decode: key %q, want pay_1", m.Key)
	}
	for _, bad := range []string{"attribute:", "sqs", "PAYMENT_ID", "jmespath:", "jmespath:a.["} {
		if _, err := payment.ParseKeySource(bad); err == nil {
			t.Errorf("ParseKeySource(%q) accepted", bad)
		}
	}
}

// TestHandlerOutcomes maps the provider's answers onto the worker's
// outcomes, over real HTTP against the fake provider.
func TestHandlerOutcomes(t *testing.T) {
	t.Parallel()
	fake, srv := fakeprovider.StartTest(t, fakeprovider.Config{
		FailFirst: func(key string, _ provider.Payment) bool { return key == "flaky" },
	})
	client, err := provider.NewClient(provider.Config{BaseURL: srv.URL, Timeout: 5 * time.Second, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := payment.Handler{Provider: client}
	handle := func(key, id string) (string, error) {
		m := &worker.Message{Key: key, Payload: provider.Payment{PaymentID: id, Amount: 500, Currency: "EUR"}, FirstAt: time.Now()}
		return h.Handle(context.Background(), m)
	}

	res, err := handle("k1", "pay_ok")
	if err != nil || !strings.HasPrefix(res, "ch_") {
		t.Errorf("charge: %q, %v; want a charge id", res, err)
	}
	if again, err := handle("k1", "pay_ok"); err != nil || again != res {
		t.Errorf("replay: %q, %v; want %q", again, err, res)
	}
	if res, err := handle("k2", "decline_1"); err != nil || !strings.HasPrefix(res, payment.DeclinedPrefix) {
		t.Errorf("decline: %q, %v; want a completed decline", res, err)
	}
	if _, err := handle("k1", "pay_other"); !worker.IsPermanent(err) {
		t.Errorf("key reused with another payment: %v, want permanent", err)
	}
	if _, err := handle("flaky", "pay_flaky"); err == nil || worker.IsPermanent(err) {
		t.Errorf("provider failure: %v, want a retryable error", err)
	}
	if res, err := handle("flaky", "pay_flaky"); err != nil || !strings.HasPrefix(res, "ch_") {
		t.Errorf("retry with the same key: %q, %v", res, err)
	}
	if st := fake.Stats(); st.Charges != 2 {
		t.Errorf("charges = %d, want 2 (pay_ok once, pay_flaky once)", st.Charges)
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	base := provider.Payment{PaymentID: "pay_1", Amount: 1999, Currency: "EUR"}
	same := provider.Payment{PaymentID: "pay_1", Amount: 1999, Currency: "EUR"}
	if payment.Fingerprint(base) != payment.Fingerprint(same) {
		t.Fatal("fingerprint is not deterministic")
	}
	for name, other := range map[string]provider.Payment{
		"amount":   {PaymentID: "pay_1", Amount: 2999, Currency: "EUR"},
		"currency": {PaymentID: "pay_1", Amount: 1999, Currency: "USD"},
		"id":       {PaymentID: "pay_2", Amount: 1999, Currency: "EUR"},
	} {
		if payment.Fingerprint(other) == payment.Fingerprint(base) {
			t.Errorf("another %s has the same fingerprint", name)
		}
	}
	m := &worker.Message{ID: "m1", Body: `{"payment_id":"pay_1","amount":1999,"currency":"EUR"}`}
	if err := (&payment.Decoder{}).Decode(m); err != nil {
		t.Fatal(err)
	}
	if m.Fingerprint != payment.Fingerprint(base) {
		t.Errorf("decoder fingerprint = %q, want %q", m.Fingerprint, payment.Fingerprint(base))
	}
}
