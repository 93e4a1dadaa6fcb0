package keyexpr_test

import (
	"errors"
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
