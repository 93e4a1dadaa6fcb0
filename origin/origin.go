package origin

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Secret is the key of the MAC. Every printed form of it (String,
// GoString, Format with any verb, LogValue, MarshalText) is "[redacted]",
// or "" when it is empty, so that no log line, error or dump shows it.
type Secret string

const redacted = "[redacted]"

// String implements fmt.Stringer: redacted.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString implements fmt.GoStringer: redacted.
func (s Secret) GoString() string { return s.String() }

// Format implements fmt.Formatter: every verb prints the redacted form.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = fmt.Fprint(f, s.String()) }

// LogValue implements slog.LogValuer: redacted.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText implements encoding.TextMarshaler (and so JSON): redacted.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MinSecretBytes is the shortest secret Check accepts: 128 bits.
const MinSecretBytes = 16

// ErrWeakSecret means a secret is shorter than MinSecretBytes.
var ErrWeakSecret = errors.New("origin: the secret is shorter than 16 bytes")

// Check returns ErrWeakSecret (wrapped, without the secret) if s is set but
// shorter than MinSecretBytes; an empty s is no secret, and no error.
func Check(s Secret) error {
	if s != "" && len(s) < MinSecretBytes {
		return fmt.Errorf("%w: got %d bytes", ErrWeakSecret, len(s))
	}
	return nil
}

// Sign returns the attribute value that vouches for id as the original id
// of a message with this body and first receipt time (the
// FirstReceivedAt attribute's value, "" if the message carries none):
// "<id>.<base64url MAC>". With no secret it returns "": nothing could
// check it.
func Sign(s Secret, id, firstReceived, body string) string {
	if s == "" {
		return ""
	}
	return id + "." + mac(s, id, firstReceived, body)
}

// Verify returns the original id value vouches for, and true, when value
// was made by Sign with s for the same first receipt time and body; else
// "" and false (always, with no secret).
func Verify(s Secret, value, firstReceived, body string) (id string, ok bool) {
	i := strings.LastIndexByte(value, '.')
	if s == "" || i <= 0 {
		return "", false
	}
	id = value[:i]
	want := mac(s, id, firstReceived, body)
	if !hmac.Equal([]byte(value[i+1:]), []byte(want)) {
		return "", false
	}
	return id, true
}

// SignedLen is the length of Sign's value for an id of n bytes.
func SignedLen(n int) int { return n + 1 + base64.RawURLEncoding.EncodedLen(sha256.Size) }

// mac is the base64url HMAC-SHA256 of the id, the first receipt time and
// a SHA-256 of the body, each part length-prefixed so none can run into
// the next.
func mac(s Secret, id, firstReceived, body string) string {
	sum := sha256.Sum256([]byte(body))
	h := hmac.New(sha256.New, []byte(s))
	for _, part := range []string{"claimfirst original id v1", id, firstReceived, string(sum[:])} {
		_, _ = fmt.Fprintf(h, "%d:", len(part))
		_, _ = h.Write([]byte(part))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}
