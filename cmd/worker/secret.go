package main

import (
	"fmt"
	"log/slog"
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
