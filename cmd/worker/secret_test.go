package main

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestSecretsNeverPrint: with the provider's API key and a password in
// PROVIDER_URL set, no help text, flag error or configuration error
// carries either.
func TestSecretsNeverPrint(t *testing.T) {
	t.Parallel()
	const key, password = "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "pw-s3cr3t-9f2"
	env := map[string]string{
		"PROVIDER_API_KEY": key,
		"PROVIDER_URL":     "https://payments:" + password + "@provider.example",
		"CLAIM_TABLE":      "claims",
	}
	badURL := map[string]string{
		"PROVIDER_API_KEY": key,
		"PROVIDER_URL":     "https://payments:" + password + "@provider.example:port/",
		"QUEUE_URL":        "http://127.0.0.1:1/000000000000/q",
		"CLAIM_TABLE":      "claims",
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
	}{
		{env, []string{"run", "-h"}},
		{env, []string{"run", "-no-such-flag"}},
		{env, []string{"run", "-concurrency", "many"}},
		{env, []string{"run", "-provider-timeout", "0s"}},
		{badURL, []string{"run"}},
		{env, []string{"provider", "-h"}},
		{env, []string{"demo", "-h"}},
		{env, []string{"setup", "-h"}},
		{env, []string{"redrive", "-h"}},
		{env, []string{"claims", "get", "-h"}},
	} {
		code, stdout, stderr := runWorker(t, tc.env, tc.args...)
		for _, secret := range []string{key, password} {
			if strings.Contains(stdout, secret) || strings.Contains(stderr, secret) {
				t.Errorf("worker %v (exit %d) printed a secret:\nstdout: %s\nstderr: %s", tc.args, code, stdout, stderr)
			}
		}
	}
}

func TestSecretRedactsEveryForm(t *testing.T) {
	t.Parallel()
	s := secret("sk_live_abc")
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("cfg", slog.Any("key", s), slog.Any("ptr", &s))
	for _, got := range []string{
		fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s %q %x", s, s, s, s, s, s), fmt.Sprintf("%v", &s),
		fmt.Sprintf("%+v", struct{ K secret }{s}), fmt.Sprintf("%#v", struct{ K secret }{s}), logged.String(),
	} {
		if strings.Contains(got, "sk_live") || strings.Contains(got, "736b5f") {
			t.Errorf("printed %q", got)
		}
	}
	if s.Value() != "sk_live_abc" {
		t.Errorf("Value() = %q", s.Value())
	}
}
