package idempotency_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/idempotency"
)

// keyLog is a memory store that keeps every key acquired, as someone who
// reads the claim table sees them.
type keyLog struct {
	claimstore.Store
	mu   sync.Mutex
	keys []string
}

func (l *keyLog) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	l.mu.Lock()
	l.keys = append(l.keys, p.Key)
	l.mu.Unlock()
	return l.Store.Acquire(ctx, p)
}

func (l *keyLog) stored() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.keys...)
}

// testSecret keys AuthorizationHash in tests.
const testSecret = idempotency.Secret("test-secret-0123456789abcdef")

// authorizationHash is AuthorizationHash(secret), which must be accepted.
func authorizationHash(t *testing.T, secret idempotency.Secret) func(*http.Request) (string, error) {
	t.Helper()
	client, err := idempotency.AuthorizationHash(secret)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func hexSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestStoredKeysGiveNoCredentialAway: whoever reads the claim table (or a
// logged stored key) cannot test password guesses against it offline: no
// unkeyed hash of the credential, nor of anything derived from it without
// the server's secret, is in a stored key.
func TestStoredKeysGiveNoCredentialAway(t *testing.T) {
	t.Parallel()
	basic := func(pw string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+pw)) }
	store := &keyLog{Store: memory.New(memory.Config{})}
	client := authorizationHash(t, testSecret)
	a := serve(t, store, idempotency.Options{Client: client}, &api{})
	if r := send(t, a.srv, "/orders", basic("hunter2"), "k", `{}`); r.status != http.StatusCreated {
		t.Fatalf("first = %+v", r)
	}
	keys := store.stored()
	if len(keys) == 0 {
		t.Fatal("no key stored")
	}
	// The attacker's dictionary, and every unkeyed derivation of a guess
	// the source code shows: the password's hash, the header's hash, and
	// the tag of the header's hash as a client name.
	for _, guess := range []string{"123456", "password", "letmein", "hunter2", "qwerty"} {
		for _, derived := range []string{
			hexSHA256(guess),
			hexSHA256(basic(guess)),
			hexSHA256(hexSHA256(basic(guess)))[:32],
			idempotency.StoreKey("", hexSHA256(basic(guess)), "k"),
		} {
			for _, k := range keys {
				if strings.Contains(k, derived) {
					t.Errorf("stored key %q contains %q, an unkeyed hash of the guess %q: the password is recovered offline", k, derived, guess)
				}
			}
		}
	}
}

// TestSecretsScopeClients: two servers sharing a store, with the same
// credential and key, are two clients if their secrets differ, and one if
// they agree.
func TestSecretsScopeClients(t *testing.T) {
	t.Parallel()
	store := memory.New(memory.Config{})
	scope := idempotency.Prefix("orders#")
	first := serve(t, store, idempotency.Options{Scope: scope, Client: authorizationHash(t, testSecret)}, &api{})
	rotated := serve(t, store, idempotency.Options{Scope: scope, Client: authorizationHash(t, "another-secret-0123456789")}, &api{})
	same := serve(t, store, idempotency.Options{Scope: scope, Client: authorizationHash(t, testSecret)}, &api{})
	r := send(t, first.srv, "/orders", "Bearer alice", "k", `{}`)
	if r.status != http.StatusCreated || r.replayed {
		t.Fatalf("first = %+v", r)
	}
	if o := send(t, rotated.srv, "/orders", "Bearer alice", "k", `{}`); o.replayed || rotated.runs.Load() != 1 {
		t.Errorf("another secret = %+v, want its own run", o)
	}
	if o := send(t, same.srv, "/orders", "Bearer alice", "k", `{}`); !o.replayed || o.body != r.body || same.runs.Load() != 0 {
		t.Errorf("the same secret on another server = %+v, want %q replayed", o, r.body)
	}
}

func TestAuthorizationHashRefusesAWeakSecret(t *testing.T) {
	t.Parallel()
	for _, secret := range []idempotency.Secret{"", "short", idempotency.Secret(strings.Repeat("x", idempotency.MinSecretBytes-1))} {
		if _, err := idempotency.AuthorizationHash(secret); !errors.Is(err, idempotency.ErrWeakSecret) {
			t.Errorf("AuthorizationHash with a %d-byte secret: err = %v, want ErrWeakSecret", len(secret), err)
		}
	}
}

func TestSecretNeverPrints(t *testing.T) {
	t.Parallel()
	const value = "s3cr3t-value-0123456789"
	s := idempotency.Secret(value)
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("start", slog.Any("secret", s), slog.Any("config", struct{ Key idempotency.Secret }{s}))
	js, err := json.Marshal(struct{ Key idempotency.Secret }{s})
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{
		fmt.Sprint(s), fmt.Sprintf("%s %v %q %x %#v %+v", s, s, s, s, s, struct{ Key idempotency.Secret }{s}),
		s.String(), logged.String(), string(js),
	} {
		if strings.Contains(out, value) || strings.Contains(out, hex.EncodeToString([]byte(value))) {
			t.Errorf("printed: %s", out)
		}
	}
	if got := fmt.Sprint(idempotency.Secret("")); got != "" {
		t.Errorf("an empty secret prints %q, want nothing", got)
	}
}
