package provider_test

import (
	"strings"
	"testing"

	"github.com/claimfirst/claimfirst/provider"
)

func TestDecodePayment(t *testing.T) {
	t.Parallel()
	valid := provider.Payment{PaymentID: "pay_123", Amount: 1999, Currency: "EUR"}
	tests := []struct {
		name string
		in   string
		want string // a part of the error; "" means valid
	}{
		{"valid", `{"payment_id": "pay_123", "amount": 1999, "currency": "EUR"}`, ""},
		{"any order, whitespace", " \n{\"currency\":\"EUR\",\"amount\":1999,\"payment_id\":\"pay_123\"}\t\n", ""},
		{"escaped id", `{"payment_id":"pay\u005f123","amount":1999,"currency":"EUR"}`, ""},
		{"empty", ``, "unexpected end"},
		{"not an object", `["pay_123"]`, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"truncated", `{"payment_id":"pay_123","amount":1999`, "unexpected end"},
		{"trailing data", `{"payment_id":"pay_123","amount":1999,"currency":"EUR"} {}`, "trailing data"},
		{"unknown field", `{"payment_id":"pay_123","amount":1999,"currency":"EUR","card":"4242"}`, `unknown field "card"`},
		{"field in other case", `{"Payment_ID":"pay_123","amount":1999,"currency":"EUR"}`, `unknown field "Payment_ID"`},
		{"duplicate field", `{"payment_id":"pay_123","amount":1,"amount":1999,"currency":"EUR"}`, `duplicate field "amount"`},
		{"missing currency", `{"payment_id":"pay_123","amount":1999}`, "currency is missing"},
		{"null id", `{"payment_id":null,"amount":1999,"currency":"EUR"}`, "payment_id must be a JSON string"},
		{"numeric id", `{"payment_id":123,"amount":1999,"currency":"EUR"}`, "payment_id must be a JSON string"},
		{"empty id", `{"payment_id":"","amount":1999,"currency":"EUR"}`, "payment_id is empty"},
		{"id too long", `{"payment_id":"` + strings.Repeat("x", 256) + `","amount":1999,"currency":"EUR"}`, "payment_id is 256 bytes"},
		{"id with newline", `{"payment_id":"pay\n123","amount":1999,"currency":"EUR"}`, "control character"},
		{"id with invalid UTF-8", "{\"payment_id\":\"pay\xff\",\"amount\":1999,\"currency\":\"EUR\"}", "UTF-8"},
		{"id with lone surrogate", `{"payment_id":"pay\ud800","amount":1999,"currency":"EUR"}`, "UTF-8"},
		{"amount as string", `{"payment_id":"pay_123","amount":"1999","currency":"EUR"}`, "amount must be a JSON integer"},
		{"amount with fraction", `{"payment_id":"pay_123","amount":19.99,"currency":"EUR"}`, "amount must be a JSON integer"},
		{"amount with zero fraction", `{"payment_id":"pay_123","amount":1999.0,"currency":"EUR"}`, "amount must be a JSON integer"},
		{"amount with exponent", `{"payment_id":"pay_123","amount":2e3,"currency":"EUR"}`, "amount must be a JSON integer"},
		{"amount null", `{"payment_id":"pay_123","amount":null,"currency":"EUR"}`, "amount must be a JSON integer"},
		{"amount zero", `{"payment_id":"pay_123","amount":0,"currency":"EUR"}`, "amount must be > 0"},
		{"amount negative", `{"payment_id":"pay_123","amount":-5,"currency":"EUR"}`, "amount must be > 0"},
		{"amount too large", `{"payment_id":"pay_123","amount":9223372036854775808,"currency":"EUR"}`, "amount is out of range"},
		{"currency lowercase", `{"payment_id":"pay_123","amount":1999,"currency":"eur"}`, "currency must be three uppercase letters"},
		{"currency too long", `{"payment_id":"pay_123","amount":1999,"currency":"EURO"}`, "currency must be three uppercase letters"},
		{"every field wrong", `{"payment_id":"","amount":0,"currency":""}`, "payment_id is empty\namount must be > 0, got 0\ncurrency must be"},
	}
	for _, tt := range tests {
		p, err := provider.DecodePayment([]byte(tt.in))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want %+v", tt.name, err, valid)
		case tt.want == "" && p != valid:
			t.Errorf("%s: got %+v, want %+v", tt.name, p, valid)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

func TestCheckKey(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"pay_123", "a", strings.Repeat("k", 255), "8e03978e-40d5-43e8-bc93-6894a57f9324", "zahlung-müller", "with inner space"} {
		if err := provider.CheckKey(key); err != nil {
			t.Errorf("CheckKey(%q) = %v, want nil", key, err)
		}
	}
	for _, key := range []string{"", strings.Repeat("k", 256), " lead", "trail ", "tab\there", "nul\x00", "del\x7f", "c1\u0085", "bad\xffutf8", "\uFFFD"} {
		if err := provider.CheckKey(key); err == nil {
			t.Errorf("CheckKey(%q) = nil, want an error", key)
		}
	}
}
