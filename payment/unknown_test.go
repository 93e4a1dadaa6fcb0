package payment_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/claimfirst/claimfirst/payment"
	"github.com/claimfirst/claimfirst/worker"
)

// TestDecoderUnknownFields: a field a producer adds is ignored by default
// (logged once per name, counted) and the fingerprint covers only the
// payment's own fields; Strict refuses it; a duplicate payment field is
// refused either way.
func TestDecoderUnknownFields(t *testing.T) {
	t.Parallel()
	plain := &worker.Message{ID: "m0", Body: body}
	if err := (&payment.Decoder{}).Decode(plain); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	d := &payment.Decoder{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	for i, b := range []string{
		`{"payment_id":"pay_1","note":"gift","amount":1999,"currency":"EUR"}`,
		`{"payment_id":"pay_1","amount":1999,"currency":"EUR","note":{"a":[1,2]},"channel":"web"}`,
	} {
		m := &worker.Message{ID: "m1", Body: b}
		if err := d.Decode(m); err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		if m.Key != plain.Key || m.Fingerprint != plain.Fingerprint {
			t.Errorf("body %d: key %q fingerprint %q, want %q %q (the payment's own fields only)", i, m.Key, m.Fingerprint, plain.Key, plain.Fingerprint)
		}
	}
	if n := strings.Count(logs.String(), `field=note`); n != 1 {
		t.Errorf("note logged %d times, want once:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), `field=channel`); n != 1 {
		t.Errorf("channel logged %d times, want once:\n%s", n, logs.String())
	}
	if got := d.UnknownFields(); got != 2 {
		t.Errorf("UnknownFields() = %d messages, want 2", got)
	}

	for _, tc := range []struct {
		name string
		d    *payment.Decoder
		body string
	}{
		{"strict", &payment.Decoder{Strict: true}, `{"payment_id":"pay_1","amount":1999,"currency":"EUR","note":"x"}`},
		{"duplicate", &payment.Decoder{}, `{"payment_id":"pay_1","amount":1999,"amount":1,"currency":"EUR"}`},
		{"missing", &payment.Decoder{}, `{"payment_id":"pay_1","note":1999,"currency":"EUR"}`},
		{"trailing", &payment.Decoder{}, `{"payment_id":"pay_1","amount":1999,"currency":"EUR","note":1} x`},
	} {
		if err := tc.d.Decode(&worker.Message{ID: "m2", Body: tc.body}); !worker.IsPermanent(err) {
			t.Errorf("%s: err = %v, want a permanent error", tc.name, err)
		}
	}
}
