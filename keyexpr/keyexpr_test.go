package keyexpr_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/claimfirst/claimfirst/keyexpr"
)

func TestExtractKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, expr, payload, want string
		missing, bad              bool
	}{
		{name: "field", expr: "order_id", payload: `{"order_id":"o-1"}`, want: "o-1"},
		{name: "nested", expr: "detail.order.id", payload: `{"detail":{"order":{"id":"o-2"}}}`, want: "o-2"},
		{name: "number", expr: "id", payload: `{"id":12345}`, want: "12345"},
		{name: "multi-select", expr: "[user, order]", payload: `{"user":"u1","order":"o9"}`, want: `["u1","o9"]`},
		{name: "object sorted", expr: "{o: order, u: user}", payload: `{"user":"u1","order":"o9"}`, want: `{"o":"o9","u":"u1"}`},
		{name: "json string", expr: "powertools_json(body).order_id", payload: `{"body":"{\"order_id\":\"o-3\"}"}`, want: "o-3"},
		{name: "json string nested", expr: "powertools_json(powertools_json(body).Message).id",
			payload: `{"body":"{\"Message\":\"{\\\"id\\\":\\\"p-4\\\"}\"}"}`, want: "p-4"},
		{name: "json string after prefix", expr: "Records[0].powertools_json(body).id", payload: `{"Records":[{"body":"{\"id\":\"r-5\"}"}]}`, want: "r-5"},
		{name: "json string then index", expr: "powertools_json(body)[1]", payload: `{"body":"[\"a\",\"b\"]"}`, want: "b"},
		{name: "json string then pipe", expr: "powertools_json(body) | id", payload: `{"body":"{\"id\":\"p\"}"}`, want: "p"},
		{name: "absent", expr: "order_id", payload: `{"id":"x"}`, missing: true},
		{name: "null", expr: "order_id", payload: `{"order_id":null}`, missing: true},
		{name: "empty string", expr: "order_id", payload: `{"order_id":""}`, missing: true},
		{name: "multi-select with a hole", expr: "[user, order]", payload: `{"user":"u1"}`, missing: true},
		{name: "json string absent", expr: "powertools_json(body).id", payload: `{}`, missing: true},
		{name: "not json", expr: "id", payload: `id=1`, bad: true},
		{name: "json string not json", expr: "powertools_json(body).id", payload: `{"body":"id=1"}`, bad: true},
		{name: "json string not a string", expr: "powertools_json(body).id", payload: `{"body":{"id":"x"}}`, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := keyexpr.New(keyexpr.Config{Key: tc.expr})
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Extract([]byte(tc.payload))
			switch {
			case tc.missing:
				var me *keyexpr.MissingKeyError
				if !errors.As(err, &me) || !errors.Is(err, keyexpr.ErrMissingKey) || me.Expr != tc.expr {
					t.Fatalf("Extract = %+v, %v; want a MissingKeyError naming %q", got, err, tc.expr)
				}
				if !strings.Contains(err.Error(), tc.expr) {
					t.Errorf("error %q does not name the expression", err)
				}
			case tc.bad:
				if !errors.Is(err, keyexpr.ErrPayload) {
					t.Fatalf("Extract = %+v, %v; want ErrPayload", got, err)
				}
			case err != nil:
				t.Fatal(err)
			case got.Key != tc.want:
				t.Errorf("key = %q, want %q", got.Key, tc.want)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	e, err := keyexpr.New(keyexpr.Config{Key: "id", Fingerprint: "[amount, currency]"})
	if err != nil {
		t.Fatal(err)
	}
	fp := func(payload string) string {
		t.Helper()
		x, err := e.Extract([]byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		return x.Fingerprint
	}
	a := fp(`{"id":"p1","amount":100,"currency":"EUR","note":"a"}`)
	if !strings.HasPrefix(a, "sha256:") || len(a) != len("sha256:")+32 {
		t.Fatalf("fingerprint %q: want sha256: and 32 hex digits", a)
	}
	if b := fp(`{"note":"other","currency":"EUR","amount":100,"id":"p1"}`); b != a {
		t.Errorf("fields outside the expression or in another order changed the fingerprint: %s != %s", b, a)
	}
	if c := fp(`{"id":"p1","amount":200,"currency":"EUR"}`); c == a {
		t.Errorf("another amount kept the fingerprint %s", c)
	}
	noFP, err := keyexpr.New(keyexpr.Config{Key: "id"})
	if err != nil {
		t.Fatal(err)
	}
	if x, err := noFP.Extract([]byte(`{"id":"p1"}`)); err != nil || x.Fingerprint != "" {
		t.Errorf("without a fingerprint expression: %+v, %v; want no fingerprint", x, err)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		c     keyexpr.Config
		field string
	}{
		{"no key", keyexpr.Config{}, "Key is required"},
		{"bad key", keyexpr.Config{Key: "a.["}, "Key"},
		{"bad fingerprint", keyexpr.Config{Key: "a", Fingerprint: "b.["}, "Fingerprint"},
		{"unclosed call", keyexpr.Config{Key: "powertools_json(body"}, "not closed"},
		{"call mid-expression", keyexpr.Config{Key: "a powertools_json(body)"}, "follow a '.'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := keyexpr.New(tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("New(%+v) = %v; want an error naming %q", tc.c, err, tc.field)
			}
		})
	}
}

func FuzzExtract(f *testing.F) {
	f.Add(`{"body":"{\"order_id\":\"o-3\"}"}`)
	f.Add(`{"body":null}`)
	f.Add(`[]`)
	f.Add(`{"body":"{\"order_id\":9007199254740993}"}`)
	f.Add(`{"body":"{\"order_id\":1.0,\"x\":1}"}`)
	f.Add(`{"body":"{\"order_id\":1e999}"}`)
	e, err := keyexpr.New(keyexpr.Config{Key: "powertools_json(body).order_id", Fingerprint: "powertools_json(body)"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		x, err := e.Extract([]byte(payload))
		if err == nil && x.Key == "" {
			t.Fatalf("Extract(%q) returned an empty key without an error", payload)
		}
	})
}

// Two payloads share a key only when the expression selects the same JSON
// value: numbers by their literal text, never rounded through float64.
func TestKeysOfNumbers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, expr, a, b string
		same             bool
	}{
		{name: "past 2^53", expr: "order_id", a: `{"order_id":9007199254740993}`, b: `{"order_id":9007199254740992}`},
		{name: "past 2^53 nested", expr: "[customer, order_id]", a: `{"customer":"c","order_id":9007199254740993}`, b: `{"customer":"c","order_id":9007199254740992}`},
		{name: "past 2^53 in a string", expr: "powertools_json(body).id", a: `{"body":"{\"id\":9007199254740993}"}`, b: `{"body":"{\"id\":9007199254740992}"}`},
		{name: "1 and 1.0", expr: "id", a: `{"id":1}`, b: `{"id":1.0}`},
		{name: "1 and 1e0", expr: "id", a: `{"id":1}`, b: `{"id":1e0}`},
		{name: "0 and -0", expr: "id", a: `{"id":0}`, b: `{"id":-0}`},
		{name: "10.5 and 10.50 in a list", expr: "[id, amount]", a: `{"id":"p","amount":10.5}`, b: `{"id":"p","amount":10.50}`},
		{name: "selected among numbers equal in value", expr: "b", a: `{"a":1,"b":1.0}`, b: `{"a":1,"b":1}`},
		{name: "filtered by value, keyed by text", expr: "items[?n > `1`].n", a: `{"items":[{"n":2.0}]}`, b: `{"items":[{"n":2}]}`},
		{name: "same literal", expr: "order_id", a: `{"order_id":9007199254740993}`, b: `{"note":"x","order_id":9007199254740993}`, same: true},
		{name: "same number, other numbers around", expr: "id", a: `{"id":5,"x":1.0}`, b: `{"id":5,"x":1}`, same: true},
		{name: "filter compares by value", expr: "items[?n == `2`].sku | [0]", a: `{"items":[{"n":2.0,"sku":"s"}]}`, b: `{"items":[{"n":2,"sku":"s"}]}`, same: true},
		// Documented: a string holds its own text, so it shares a key with
		// the value whose JSON text it holds.
		{name: "a string and the number it spells", expr: "id", a: `{"id":"1"}`, b: `{"id":1}`, same: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := keyexpr.New(keyexpr.Config{Key: tc.expr})
			if err != nil {
				t.Fatal(err)
			}
			a, errA := e.Extract([]byte(tc.a))
			b, errB := e.Extract([]byte(tc.b))
			if errA != nil || errB != nil {
				t.Fatalf("Extract: %v; %v", errA, errB)
			}
			if (a.Key == b.Key) != tc.same {
				t.Errorf("keys %q and %q; want same=%v", a.Key, b.Key, tc.same)
			}
		})
	}
}

// A number keeps its literal text in the key and the fingerprint.
func TestNumberKeyText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ expr, payload, want string }{
		{"id", `{"id":9007199254740993}`, "9007199254740993"},
		{"id", `{"id":1.0}`, "1.0"},
		{"id", `{"id":1E+2}`, "1E+2"},
		{"id", `{"id":12345}`, "12345"},
		{"[a, b]", `{"a":1.50,"b":"x"}`, `[1.50,"x"]`},
		{"{z: a, y: b}", `{"a":-0,"b":2}`, `{"y":2,"z":-0}`},
		{"length(items)", `{"items":[1,2,3]}`, "3"},
		{"[a, b]", `{"a":1,"b":1.0}`, "[1,1.0]"},
		{"to_string(id)", `{"id":5,"x":1.0}`, "5"},
		{"max(xs)", `{"xs":[1.0,3.00,2]}`, "3.00"},
		{"[id, `7`]", `{"id":9007199254740993}`, "[9007199254740993,7]"},
	} {
		t.Run(tc.payload, func(t *testing.T) {
			t.Parallel()
			e, err := keyexpr.New(keyexpr.Config{Key: tc.expr})
			if err != nil {
				t.Fatal(err)
			}
			x, err := e.Extract([]byte(tc.payload))
			if err != nil || x.Key != tc.want {
				t.Errorf("Extract(%s) by %q = %q, %v; want %q", tc.payload, tc.expr, x.Key, err, tc.want)
			}
		})
	}
	e, err := keyexpr.New(keyexpr.Config{Key: "id", Fingerprint: "amount"})
	if err != nil {
		t.Fatal(err)
	}
	a, errA := e.Extract([]byte(`{"id":"p","amount":9007199254740993}`))
	b, errB := e.Extract([]byte(`{"id":"p","amount":9007199254740992}`))
	if errA != nil || errB != nil || a.Fingerprint == b.Fingerprint {
		t.Errorf("fingerprints of two amounts past 2^53: %q, %q (%v, %v); want two", a.Fingerprint, b.Fingerprint, errA, errB)
	}
}

// A number that has no float64 (out of range) or an expression whose value
// depends on reading a number as float64 cannot be a key: poison, naming
// the expression, never a rounded key.
func TestUnsupportedNumbersPoison(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, expr, payload string }{
		{"out of range", "id", `{"id":1e999}`},
		{"out of range in a list", "[a, id]", `{"a":"x","id":-1e400}`},
		{"computed infinity", "sum(xs)", `{"xs":[1e308,1e308]}`},
		{"rendered past 2^53", "to_string(id)", `{"id":9007199254740993}`},
		{"out of range fingerprint", "", `{"id":"p","amount":1e999}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := keyexpr.Config{Key: tc.expr}
			named := tc.expr
			if tc.expr == "" {
				c, named = keyexpr.Config{Key: "id", Fingerprint: "amount"}, "amount"
			}
			e, err := keyexpr.New(c)
			if err != nil {
				t.Fatal(err)
			}
			x, err := e.Extract([]byte(tc.payload))
			if !errors.Is(err, keyexpr.ErrPayload) || !strings.Contains(err.Error(), strconv.Quote(named)) {
				t.Errorf("Extract(%s) = %+v, %v; want ErrPayload naming %q", tc.payload, x, err, named)
			}
		})
	}
}

// Two payloads that differ only in a number's text never share a key.
func FuzzNumberKeys(f *testing.F) {
	f.Add("9007199254740993", "9007199254740992")
	f.Add("1", "1.0")
	f.Add("0", "-0")
	f.Add("1e2", "100")
	f.Add("1e999", "2e999")
	e, err := keyexpr.New(keyexpr.Config{Key: "[id, other]", Fingerprint: "id"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		var na, nb json.Number
		if json.Unmarshal([]byte(a), &na) != nil || json.Unmarshal([]byte(b), &nb) != nil || string(na) != a || string(nb) != b {
			return // not a JSON number literal
		}
		// The other field holds the other text, so each value is read
		// beside its twin.
		xa, errA := e.Extract([]byte(`{"id":` + a + `,"other":[` + b + `]}`))
		xb, errB := e.Extract([]byte(`{"id":` + b + `,"other":[` + a + `]}`))
		if errA != nil || errB != nil {
			if !errors.Is(errA, keyexpr.ErrNumber) && errA != nil || !errors.Is(errB, keyexpr.ErrNumber) && errB != nil {
				t.Fatalf("%s, %s: errors %v, %v; want ErrNumber", a, b, errA, errB)
			}
			return
		}
		if (xa.Key == xb.Key) != (a == b) || (xa.Fingerprint == xb.Fingerprint) != (a == b) {
			t.Fatalf("%s and %s: keys %q, %q, fingerprints %q, %q", a, b, xa.Key, xb.Key, xa.Fingerprint, xb.Fingerprint)
		}
	})
}

// An expression searches the message as published; one that starts with
// $body searches the body as it was delivered, envelopes and all.
func TestBodyRoot(t *testing.T) {
	t.Parallel()
	event := `{"version":"0","id":"ev-1","detail-type":"Order Paid","source":"shop","time":"2026-12-04T10:00:00Z",` +
		`"region":"eu-west-1","resources":[],"detail":{"id":"ord-1","amount":9007199254740993}}`
	detail := `{"id":"ord-1","amount":9007199254740993}`
	sns := `{"Type":"Notification","MessageId":"sns-1","Message":"{\"id\":\"ord-2\"}"}`
	for _, tc := range []struct {
		name, expr, payload, body, want string
	}{
		{name: "the payload", expr: "id", payload: detail, body: event, want: "ord-1"},
		{name: "the body", expr: "$body.id", payload: detail, body: event, want: "ev-1"},
		{name: "the body's numbers as written", expr: "$body.detail.amount", payload: detail, body: event, want: "9007199254740993"},
		{name: "the body piped", expr: "$body | [source, id]", payload: detail, body: event, want: `["shop","ev-1"]`},
		{name: "the body indexed", expr: "$body[1]", payload: `{}`, body: `["a","b"]`, want: "b"},
		{name: "a document in the body", expr: "$body.powertools_json(Message).id", payload: `{"id":"ord-2"}`, body: sns, want: "ord-2"},
		{name: "no envelope: the body is the payload", expr: "$body.id", payload: detail, want: "ord-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := keyexpr.New(keyexpr.Config{Key: tc.expr, Fingerprint: tc.expr})
			if err != nil {
				t.Fatal(err)
			}
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			var doc any
			x, err := e.ExtractInput(keyexpr.Input{Payload: []byte(tc.payload), Body: body}, &doc)
			if err != nil || x.Key != tc.want || x.Fingerprint == "" {
				t.Fatalf("ExtractInput by %q = %+v, %v; want key %q", tc.expr, x, err, tc.want)
			}
			if m, ok := doc.(map[string]any); tc.payload == detail && (!ok || m["id"] != "ord-1") {
				t.Errorf("decoded payload %v; want the payload, not the body", doc)
			}
		})
	}
	e, err := keyexpr.New(keyexpr.Config{Key: "$body.id"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ExtractInput(keyexpr.Input{Payload: []byte(detail), Body: []byte("not json")}, new(any)); !errors.Is(err, keyexpr.ErrPayload) {
		t.Errorf("a body that is not JSON: %v; want ErrPayload", err)
	}
	for _, bad := range []string{"[$body.id, id]", "a.$body", "$bodyx", "$body id", "$other.id"} {
		if _, err := keyexpr.New(keyexpr.Config{Key: bad}); err == nil || !strings.Contains(err.Error(), "$body") {
			t.Errorf("New(%q) = %v; want an error saying where $body may stand", bad, err)
		}
	}
}
