package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// secret is a setting that must never be printed: the provider's API key.
// Every way of printing it (String, GoString, Format with any verb,
// LogValue) shows "[redacted]" or, unset, nothing; Value is the only way to
// the secret itself. As a flag.Value it has no default, so usage text
// cannot show one.
type secret string

const redacted = "[redacted]"

// Value returns the secret itself, for the one place that sends it.
func (s *secret) Value() string { return string(*s) }

// String implements flag.Value and fmt.Stringer: redacted.
func (s *secret) String() string {
	if s == nil || *s == "" {
		return ""
	}
	return redacted
}

// Set implements flag.Value.
func (s *secret) Set(v string) error {
	*s = secret(v)
	return nil
}

// GoString implements fmt.GoStringer: redacted.
func (s secret) GoString() string { return (&s).String() }

// Format implements fmt.Formatter: every verb prints the redacted form.
func (s secret) Format(f fmt.State, _ rune) { _, _ = fmt.Fprint(f, (&s).String()) }

// LogValue implements slog.LogValuer: redacted.
func (s secret) LogValue() slog.Value { return slog.StringValue((&s).String()) }

// secretsAPI is the Secrets Manager call the worker makes.
type secretsAPI interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// readSecret reads the string value of the Secrets Manager secret id (a
// name or an ARN): the provider's API key, read once at start so that it is
// in no template, environment variable or log.
func readSecret(ctx context.Context, api secretsAPI, id string) (secret, error) {
	out, err := api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		return "", fmt.Errorf("PROVIDER_API_KEY_SECRET %s: %w", id, err)
	}
	v := strings.TrimSpace(aws.ToString(out.SecretString))
	if v == "" {
		return "", fmt.Errorf("PROVIDER_API_KEY_SECRET %s: the secret has no string value: put the key in it (aws secretsmanager put-secret-value)", id)
	}
	return secret(v), nil
}
