package provider

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind says what a failed charge means for the caller.
type Kind int

// The kinds of Error.
const (
	// KindUnknown means the outcome is unknown (5xx, 408, 409, 429, a timeout,
	// a connection error, the context ended): the charge may have happened.
	// Retry later with the same key.
	KindUnknown Kind = iota
	// KindDeclined means the provider declined the payment (402): a
	// definitive business outcome, to be recorded as the payment's result.
	KindDeclined
	// KindKeyMismatch means the key was already used with a different
	// payload (422): permanent.
	KindKeyMismatch
	// KindBadRequest means the request can never succeed (400, or a key or
	// payment the client refused to send): permanent.
	KindBadRequest
	// KindDependency means the provider refused us, not the payment (401,
	// 403, 404, 405, another 4xx, an unexpected redirect): credentials or
	// configuration are wrong, and nothing was charged. Not the message's
	// fault: fix the setting and the same request will succeed.
	KindDependency
)

// String returns the kind's name as used in logs and metrics.
func (k Kind) String() string {
	switch k {
	case KindUnknown:
		return "unknown"
	case KindDeclined:
		return "declined"
	case KindKeyMismatch:
		return "key_mismatch"
	case KindBadRequest:
		return "bad_request"
	case KindDependency:
		return "dependency"
	default:
		return "Kind(" + strconv.Itoa(int(k)) + ")"
	}
}

// Error is every error Client.Charge returns; use errors.As to get it.
type Error struct {
	// Kind says what the failure means for the caller.
	Kind Kind
	// StatusCode is the HTTP status of the last answer; 0 when there was none
	// (a transport error, or a request the client refused to send).
	StatusCode int
	// Type is the provider's machine-readable error type, such as
	// "card_declined"; empty when the answer carried none.
	Type string
	// Reason is the provider's message, or the client's reason for refusing
	// to send; safe to log (never request data or secrets).
	Reason string
	// Attempts is the number of HTTP requests made.
	Attempts int
	// NotSent reports that the last attempt never reached the provider (the
	// connection was refused or could not be made): that attempt charged
	// nothing. Earlier attempts may have; the outcome stays KindUnknown.
	NotSent bool
	// Err is the underlying cause, if any: a transport error, or the context's
	// error when the context ended the retries.
	Err error
}

// Error describes the failure in one line.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("provider: ")
	switch e.Kind {
	case KindUnknown:
		b.WriteString("charge outcome unknown")
	case KindDeclined:
		b.WriteString("charge declined")
	case KindKeyMismatch:
		b.WriteString("idempotency key reused with a different payment")
	case KindBadRequest:
		b.WriteString("bad charge request")
	case KindDependency:
		b.WriteString("provider refused the client (credentials or configuration)")
	default:
		b.WriteString(e.Kind.String())
	}
	if e.StatusCode != 0 {
		b.WriteString(": HTTP ")
		b.WriteString(strconv.Itoa(e.StatusCode))
		if e.Type != "" {
			b.WriteByte(' ')
			b.WriteString(e.Type)
		}
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	if e.NotSent {
		b.WriteString(": not sent")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.Attempts > 0 {
		fmt.Fprintf(&b, " (%d attempt", e.Attempts)
		if e.Attempts > 1 {
			b.WriteByte('s')
		}
		b.WriteByte(')')
	}
	return b.String()
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether the outcome is unknown, so that the same request
// with the same key may be tried again later.
func (e *Error) Retryable() bool { return e.Kind == KindUnknown }

// ErrorResponse is the body of every non-2xx answer of the provider.
type ErrorResponse struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes a provider error.
type ErrorDetail struct {
	// Type is machine-readable: one of the Type constants, or another the
	// provider defines.
	Type string `json:"type"`
	// Message is for people; it never contains card data.
	Message string `json:"message"`
}

// The error types of ErrorDetail that the fake provider sends.
const (
	// TypeInvalidRequest: the body or the key is malformed or missing (400).
	TypeInvalidRequest = "invalid_request"
	// TypeCardDeclined: the payment was declined (402).
	TypeCardDeclined = "card_declined"
	// TypeKeyInUse: a request with the same key is still being processed (409).
	TypeKeyInUse = "idempotency_key_in_use"
	// TypeKeyMismatch: the key was used with a different payload (422).
	TypeKeyMismatch = "idempotency_key_mismatch"
	// TypeUnavailable: the provider failed before charging (503).
	TypeUnavailable = "unavailable"
)
