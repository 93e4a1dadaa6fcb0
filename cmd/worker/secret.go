package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/claimfirst/claimfirst/origin"
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
	return readNamedSecret(ctx, api, "PROVIDER_API_KEY_SECRET", id)
}

// readNamedSecret is readSecret for the setting env.
func readNamedSecret(ctx context.Context, api secretsAPI, env, id string) (secret, error) {
	out, err := api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", env, id, err)
	}
	v := strings.TrimSpace(aws.ToString(out.SecretString))
	if v == "" {
		return "", fmt.Errorf("%s %s: the secret has no string value: put the value in it (aws secretsmanager put-secret-value)", env, id)
	}
	return secret(v), nil
}

// originSettings are the original-id secret's settings (worker.Protocol.
// OriginalIDSecret), shared by run, the Lambda mode and redrive: the secret
// itself, or a Secrets Manager secret holding it.
type originSettings struct {
	value *secret
	id    *string
}

func defineOrigin(s *settings) originSettings {
	return originSettings{
		value: s.Secret("original-id-secret", "ORIGINAL_ID_SECRET",
			"secret (at least 16 bytes) keying the MAC of OriginalMessageId on dead letters; the same for every worker of the queue and its redrive; never printed (see SECURITY.md)"),
		id: s.String("original-id-secret-id", "ORIGINAL_ID_SECRET_ID", "",
			"Secrets Manager secret (name or ARN) holding ORIGINAL_ID_SECRET, read at start instead"),
	}
}

// secret returns the original-id secret, read from Secrets Manager when
// ORIGINAL_ID_SECRET_ID is set; "" when neither is set.
func (o originSettings) secret(ctx context.Context, cfg aws.Config) (origin.Secret, error) {
	v := *o.value
	switch {
	case v != "" && *o.id != "":
		return "", usagef("ORIGINAL_ID_SECRET and ORIGINAL_ID_SECRET_ID are both set: give the secret one way")
	case *o.id != "":
		var err error
		if v, err = readNamedSecret(ctx, secretsmanager.NewFromConfig(cfg), "ORIGINAL_ID_SECRET_ID", *o.id); err != nil {
			return "", err
		}
	}
	if err := origin.Check(origin.Secret(v)); err != nil {
		return "", usagef("ORIGINAL_ID_SECRET (-original-id-secret): must be at least %d bytes", origin.MinSecretBytes)
	}
	return origin.Secret(v), nil
}
