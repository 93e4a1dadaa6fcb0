package main

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/claimfirst/claimfirst/internal/awstest"
)

// TestReadSecret: the provider's API key is read from Secrets Manager over
// the wire; a secret without a value, or none at all, is a clear error that
// does not carry a value.
func TestReadSecret(t *testing.T) {
	t.Parallel()
	api := secretsmanager.NewFromConfig(awstest.Config(t))
	name := awstest.Name("provider-key")
	out, err := api.CreateSecret(t.Context(), &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String("sk_live_from_secrets\n")})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{name, aws.ToString(out.ARN)} {
		got, err := readSecret(t.Context(), api, id)
		if err != nil || got.Value() != "sk_live_from_secrets" {
			t.Errorf("readSecret(%s) = %v, %v; want the key, trimmed", id, got, err)
		}
	}
	if _, err := readSecret(t.Context(), api, awstest.Name("absent")); err == nil || !strings.Contains(err.Error(), "PROVIDER_API_KEY_SECRET") {
		t.Errorf("absent secret: err = %v, want one naming PROVIDER_API_KEY_SECRET", err)
	}
}

func TestKeyAndSecretBothSetIsRefused(t *testing.T) {
	t.Parallel()
	code, _, stderr := runWorker(t, map[string]string{
		"CLAIM_TABLE": "claims", "QUEUE_URL": "http://127.0.0.1:1/000000000000/q", "PROVIDER_URL": "https://provider.example",
		"PROVIDER_API_KEY": "sk_test_1", "PROVIDER_API_KEY_SECRET": "provider-key",
	}, "run")
	if code != 2 || !strings.Contains(stderr, "both set") || strings.Contains(stderr, "sk_test_1") {
		t.Errorf("key and secret: exit %d, stderr %q; want 2, refused without the key", code, stderr)
	}
}
