package provider

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		replayed string
		body     string
		wantID   string
		kind     Kind
		typ      string
		reason   string
	}{
		{"charged", 200, "", `{"id":"ch_1","status":"succeeded"}`, "ch_1", 0, "", ""},
		{"created, extra fields", 201, "", `{"id":"ch_1","status":"succeeded","amount":5}`, "ch_1", 0, "", ""},
		{"no id", 200, "", `{"status":"succeeded"}`, "", KindUnknown, "", "success answer without a charge id"},
		{"pending", 200, "", `{"id":"ch_1","status":"pending"}`, "", KindUnknown, "", `charge status is "pending"`},
		{"not JSON", 200, "", `<html>`, "", KindUnknown, "", "undecodable success answer"},
		{"declined", 402, "", `{"error":{"type":"card_declined","message":"insufficient funds"}}`, "", KindDeclined, "card_declined", "insufficient funds"},
		{"declined, replayed", 402, "true", `{"error":{"type":"card_declined","message":"no"}}`, "", KindDeclined, "card_declined", "no"},
		{"mismatch", 422, "", `{"error":{"type":"idempotency_key_mismatch","message":"m"}}`, "", KindKeyMismatch, "idempotency_key_mismatch", "m"},
		{"in use", 409, "", `{"error":{"type":"idempotency_key_in_use","message":"busy"}}`, "", KindUnknown, "idempotency_key_in_use", "busy"},
		{"bad request, HTML", 400, "", `<h1>Bad</h1>`, "", KindBadRequest, "", "Bad Request"},
		{"unauthorized", 401, "", ``, "", KindDependency, "", "Unauthorized"},
		{"request timeout", 408, "", ``, "", KindUnknown, "", "Request Timeout"},
		{"rate limited", 429, "", ``, "", KindUnknown, "", "Too Many Requests"},
		{"gateway", 504, "", `{"error":{"message":"line1\nline2\u0007"}}`, "", KindUnknown, "", "line1 line2 "},
		{"odd status", 599, "", ``, "", KindUnknown, "", ""},
		{"redirect", 307, "", ``, "", KindDependency, "", "Temporary Redirect"},
	}
	for _, tt := range tests {
		ch, e := classify(tt.status, tt.replayed, []byte(tt.body))
		if tt.wantID != "" {
			if e != nil || ch.ID != tt.wantID {
				t.Errorf("%s: got %+v, %v; want charge %s", tt.name, ch, e, tt.wantID)
			}
			continue
		}
		if e == nil {
			t.Errorf("%s: got charge %+v, want an error", tt.name, ch)
			continue
		}
		if e.Kind != tt.kind || e.Type != tt.typ || e.Reason != tt.reason || e.StatusCode != tt.status {
			t.Errorf("%s: got %+v, want kind %v, type %q, reason %q", tt.name, e, tt.kind, tt.typ, tt.reason)
		}
	}
	if ch, _ := classify(200, "true", []byte(`{"id":"ch_1","status":"succeeded"}`)); !ch.Replayed {
		t.Error("Idempotent-Replayed: true was not reported")
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	huge := time.Duration(math.MaxInt64)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"5", 5 * time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"9223372036", 9223372036 * time.Second, true},
		{"9223372037", huge, true},
		{"99999999999999999999999", huge, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"Sun, 01 Mar 2026 12:00:30 GMT", 30 * time.Second, true},
		{"Sunday, 01-Mar-26 12:01:00 GMT", time.Minute, true},
		{"Sun Mar  1 12:00:10 2026", 10 * time.Second, true},
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0, true},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzDecodePayment(f *testing.F) {
	for _, s := range []string{
		`{"payment_id":"pay_123","amount":1999,"currency":"EUR"}`,
		`{"currency":"USD","payment_id":"decline_1","amount":1}`,
		`{"payment_id":"pay\u00e9","amount":9223372036854775807,"currency":"JPY"}`,
		`{"payment_id":"pay_1","amount":1999,"currency":"EUR","extra":true}`,
		`{"payment_id":"pay_1","amount":1e3,"currency":"EUR"}`,
		`{"payment_id":"pay_1","amount":-0,"currency":"EUR"}`,
		`{"payment_id":"p","payment_id":"q","amount":1,"currency":"EUR"}`,
		`{"payment_id":null,"amount":1,"currency":"EUR"}`,
		`{"payment_id":"\ud83d\ude00","amount":1,"currency":"EUR"}`,
		`{"payment_id":"\ud800","amount":1,"currency":"EUR"}`,
		`{"payment_id":"p","amount":1,"currency":"EUR"}{}`,
		`[]`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePayment(data)
		if err != nil {
			if p != (Payment{}) {
				t.Errorf("DecodePayment returned %+v with error %v", p, err)
			}
			if !utf8.ValidString(err.Error()) {
				t.Errorf("error is not valid UTF-8: %q", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("DecodePayment accepted %q as %+v, which Validate rejects: %v", data, p, err)
		}
		if err := CheckKey(p.PaymentID); err != nil {
			t.Fatalf("DecodePayment accepted payment_id %q, which cannot be a key: %v", p.PaymentID, err)
		}
		// The strict decoder accepts a subset of what encoding/json does,
		// and agrees with it there.
		var lenient Payment
		if err := json.Unmarshal(data, &lenient); err != nil || lenient != p {
			t.Fatalf("encoding/json reads %q as %+v (%v), DecodePayment as %+v", data, lenient, err, p)
		}
		// What the client sends decodes to the same payment.
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodePayment(out)
		if err != nil || again != p {
			t.Fatalf("round trip of %+v via %s gave %+v, %v", p, out, again, err)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add(200, "", []byte(`{"id":"ch_0123456789abcdef","status":"succeeded"}`), "")
	f.Add(200, "true", []byte(`{"id":"ch_0123456789abcdef","status":"succeeded"}`), "")
	f.Add(201, "TRUE", []byte(`{"id":"","status":"succeeded"}`), "")
	f.Add(200, "", []byte(`{"id":"ch_1","status":"pending\u0000"}`), "")
	f.Add(402, "", []byte(`{"error":{"type":"card_declined","message":"the card was declined"}}`), "")
	f.Add(409, "", []byte(`{"error":{"type":"idempotency_key_in_use","message":"busy"}}`), "1")
	f.Add(422, "", []byte(`{"error":{"type":"idempotency_key_mismatch","message":"m"}}`), "")
	f.Add(429, "", []byte(`{"error":"rate limited"}`), "Wed, 21 Oct 2015 07:28:00 GMT")
	f.Add(503, "", []byte("<html>\xff\xfe</html>"), "99999999999999999999")
	f.Add(400, "", []byte(`{"error":{"message":"`+strings.Repeat("é", 300)+`"}}`), "-3")
	f.Fuzz(func(t *testing.T, status int, replayed string, body []byte, retryAfter string) {
		status = 100 + abs(status)%900
		ch, e := classify(status, replayed, body)
		ok := status >= 200 && status < 300
		if e == nil {
			if !ok || ch.ID == "" || ch.Status != StatusSucceeded {
				t.Fatalf("classify(%d, %q) = %+v, a success", status, body, ch)
			}
			return
		}
		if ch != (Charge{}) {
			t.Errorf("classify returned %+v with an error", ch)
		}
		if e.StatusCode != status {
			t.Errorf("StatusCode = %d, want %d", e.StatusCode, status)
		}
		if ok && e.Kind != KindUnknown {
			t.Errorf("an unreadable %d answer is %v, want unknown (the charge may have happened)", status, e.Kind)
		}
		if !ok && e.Kind != kindOf(status) {
			t.Errorf("a %d answer is %v, want %v", status, e.Kind, kindOf(status))
		}
		for _, s := range []string{e.Type, e.Reason} {
			if len(s) > maxReasonBytes+32 || !utf8.ValidString(s) || strings.ContainsAny(s, "\r\n\x00\x1b") {
				t.Errorf("provider text %q is not safe for one log line", s)
			}
		}
		if msg := e.Error(); strings.ContainsAny(msg, "\r\n") || !strings.HasPrefix(msg, "provider: ") {
			t.Errorf("Error() = %q, want one line starting with provider:", msg)
		}

		c := &Client{minBackoff: time.Millisecond, maxBackoff: time.Second}
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		if d, ok := parseRetryAfter(retryAfter, now); ok && d < 0 {
			t.Errorf("Retry-After %q parsed as %v", retryAfter, d)
		}
		for attempt := 1; attempt < 70; attempt += 7 {
			if w := c.backoff(attempt, retryAfter, now); w < 0 || w > c.maxBackoff {
				t.Errorf("backoff(%d, Retry-After %q) = %v, want within [0, %v]", attempt, retryAfter, w, c.maxBackoff)
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		if n == math.MinInt {
			return 0
		}
		return -n
	}
	return n
}
