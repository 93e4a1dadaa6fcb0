package idempotency

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
)

// Secret is a server secret, such as the key of AuthorizationHash. Every
// printed form of it (String, GoString, Format with any verb, LogValue,
// MarshalText) is "[redacted]", or "" when it is empty, so that no log
// line, error or dump shows it; convert it to a string only where it is
// used.
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

// MinSecretBytes is the shortest secret AuthorizationHash accepts: 128 bits.
const MinSecretBytes = 16

// ErrWeakSecret means a secret is empty or shorter than MinSecretBytes.
var ErrWeakSecret = errors.New("idempotency: the secret is empty or shorter than 16 bytes")

// AuthorizationHash returns a Client for an API whose clients each send
// their own credentials: an HMAC-SHA256 of the Authorization header keyed
// with secret. Neither the credential nor a hash of it that could be
// tested against guesses offline reaches the store: whoever reads the
// claim table without the secret learns nothing of the credentials. A new
// credential (a rotated API key) is a new client, whose keys start afresh.
// A request without the header gets ErrNoClient (401).
//
// Every server sharing a store needs the same secret, kept across
// restarts: read it from a secret store. Rotating it makes every client a
// new one: keys stored under the old secret are not found, so a request
// answered before the rotation and retried after it runs the handler
// again. Rotate when clients have no retries outstanding (at most
// Options.Retention after the last request answered under the old secret).
//
// Errors: ErrWeakSecret for an empty or short secret.
func AuthorizationHash(secret Secret) (func(*http.Request) (string, error), error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("%w: AuthorizationHash needs a secret of at least %d bytes, got %d", ErrWeakSecret, MinSecretBytes, len(secret))
	}
	key := []byte(secret)
	return func(r *http.Request) (string, error) {
		auth := r.Header.Get("Authorization")
		if auth == "" {
			return "", ErrNoClient
		}
		mac := hmac.New(sha256.New, key)
		_, _ = mac.Write([]byte(auth))
		return hex.EncodeToString(mac.Sum(nil)), nil
	}, nil
}
