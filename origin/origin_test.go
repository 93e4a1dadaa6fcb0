package origin_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/claimfirst/claimfirst/origin"
)

const secret origin.Secret = "0123456789abcdef-test"

// TestVerify: a value Sign made verifies for the same id, first receipt
// time and body under the same secret, and nothing else does: a bare id, a
// value moved to another body, a changed time, another secret, a MAC of
// another id, or any value at all without a secret.
func TestVerify(t *testing.T) {
	t.Parallel()
	good := origin.Sign(secret, "id-1", "2026-01-02T03:04:05Z", "body")
	if !strings.HasPrefix(good, "id-1.") || len(good) != origin.SignedLen(len("id-1")) {
		t.Fatalf("Sign = %q, want id-1.<mac> of %d bytes", good, origin.SignedLen(4))
	}
	other := origin.Sign(secret, "id-2", "2026-01-02T03:04:05Z", "body")
	tests := []struct {
		name               string
		s                  origin.Secret
		value, first, body string
		wantID             string
	}{
		{"signed", secret, good, "2026-01-02T03:04:05Z", "body", "id-1"},
		{"bare id (a producer's)", secret, "id-1", "2026-01-02T03:04:05Z", "body", ""},
		{"another body", secret, good, "2026-01-02T03:04:05Z", "another body", ""},
		{"another first receipt", secret, good, "2026-01-01T00:00:00Z", "body", ""},
		{"no first receipt", secret, good, "", "body", ""},
		{"another secret", "another secret, 16+ bytes", good, "2026-01-02T03:04:05Z", "body", ""},
		{"no secret", "", good, "2026-01-02T03:04:05Z", "body", ""},
		{"another id's MAC", secret, "id-1" + other[len("id-2"):], "2026-01-02T03:04:05Z", "body", ""},
		{"empty id", secret, "." + good[len("id-1."):], "2026-01-02T03:04:05Z", "body", ""},
		{"empty", secret, "", "", "", ""},
	}
	for _, tc := range tests {
		id, ok := origin.Verify(tc.s, tc.value, tc.first, tc.body)
		if id != tc.wantID || ok != (tc.wantID != "") {
			t.Errorf("%s: Verify = %q, %v; want %q", tc.name, id, ok, tc.wantID)
		}
	}
	if got := origin.Sign("", "id-1", "", "body"); got != "" {
		t.Errorf("Sign without a secret = %q, want \"\"", got)
	}
}

// TestSecretNeverPrinted: no verb, log line or JSON shows the secret.
func TestSecretNeverPrinted(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	l := slog.New(slog.NewJSONHandler(&b, nil))
	l.Info("x", slog.Any("secret", secret))
	for _, s := range []string{fmt.Sprint(secret), fmt.Sprintf("%s %v %+v %#v %q %x", secret, secret, secret, secret, secret, secret), b.String()} {
		if strings.Contains(s, string(secret)) || strings.Contains(s, "6162") {
			t.Errorf("printed: %s", s)
		}
	}
	if err := origin.Check("Zq9-x"); !errors.Is(err, origin.ErrWeakSecret) || strings.Contains(err.Error(), "Zq9-x") {
		t.Errorf("Check(Zq9-x) = %v", err)
	}
	if err := origin.Check(""); err != nil {
		t.Errorf("Check(\"\") = %v, want nil: no secret", err)
	}
}
