package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxKeyBytes is the longest idempotency key, and the longest payment_id, in
// bytes: the common provider limit for idempotency keys.
const MaxKeyBytes = 255

// Payment is the body of a charge request and the schema of the payment
// message on the queue.
type Payment struct {
	// PaymentID is the business key of the payment: 1 to MaxKeyBytes bytes of
	// UTF-8 with no control characters and no leading or trailing space (it
	// is the default idempotency key and travels in a header).
	PaymentID string `json:"payment_id"`
	// Amount is in minor units (cents) and greater than zero.
	Amount int64 `json:"amount"`
	// Currency is an ISO 4217 code: three uppercase ASCII letters.
	Currency string `json:"currency"`
}

// Validate reports every field of p that breaks the schema, each error naming
// the field by its JSON name, joined with errors.Join.
func (p Payment) Validate() error {
	var errs []error
	if err := checkID(p.PaymentID); err != nil {
		errs = append(errs, fmt.Errorf("payment_id %w", err))
	}
	if p.Amount <= 0 {
		errs = append(errs, fmt.Errorf("amount must be > 0, got %d", p.Amount))
	}
	if !validCurrency(p.Currency) {
		errs = append(errs, fmt.Errorf("currency must be three uppercase letters, got %q", clip(p.Currency)))
	}
	return errors.Join(errs...)
}

// CheckKey reports whether key can be used as an idempotency key: 1 to
// MaxKeyBytes bytes of UTF-8 with no control characters and no leading or
// trailing space, so that it survives an HTTP header unchanged.
func CheckKey(key string) error {
	if err := checkID(key); err != nil {
		return fmt.Errorf("idempotency key %w", err)
	}
	return nil
}

// checkID holds the rules shared by keys and payment ids. Its errors read
// after the name of the thing checked.
func checkID(s string) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case len(s) > MaxKeyBytes:
		return fmt.Errorf("is %d bytes, more than %d", len(s), MaxKeyBytes)
	case !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError):
		return errors.New("is not valid UTF-8")
	case s[0] == ' ' || s[len(s)-1] == ' ':
		return errors.New("has leading or trailing space")
	}
	for i, r := range s {
		if unicode.IsControl(r) { // C0, DEL and C1
			return fmt.Errorf("has a control character at byte %d", i)
		}
	}
	return nil
}

func validCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// clip shortens s for an error message.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	i := limit
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// DecodePayment decodes a payment strictly: one JSON object with exactly the
// fields payment_id (a string), amount (a JSON integer) and currency (a
// string), each once and spelled exactly so, that passes Validate. Anything
// else is an error rather than coerced: unknown, missing, duplicate or null
// fields, a fraction or exponent in the amount, trailing data.
func DecodePayment(data []byte) (Payment, error) {
	p, _, err := decodePayment(data, true)
	return p, err
}

// DecodePaymentTolerant is DecodePayment that skips fields other than
// payment_id, amount and currency (whatever their values) and returns their
// names, in order, instead of refusing them: a producer that adds a field
// does not make every payment invalid. Every other check stays: missing,
// duplicate or null payment fields, a fraction or exponent in the amount,
// trailing data.
func DecodePaymentTolerant(data []byte) (p Payment, unknown []string, err error) {
	return decodePayment(data, false)
}

// decodePayment decodes data; strict refuses unknown fields, otherwise
// their names are returned.
func decodePayment(data []byte, strict bool) (p Payment, unknown []string, _ error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return Payment{}, nil, fmt.Errorf("payment: %w", syntaxErr(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Payment{}, nil, errors.New("payment: not a JSON object")
	}
	var seen [3]bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Payment{}, nil, fmt.Errorf("payment: %w", syntaxErr(err))
		}
		name, _ := tok.(string) // inside an object, Token returns keys as strings
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return Payment{}, nil, fmt.Errorf("payment: %w", syntaxErr(err))
		}
		var i int
		switch name {
		case "payment_id":
			i, err = 0, decodeString(raw, &p.PaymentID)
		case "amount":
			i, err = 1, decodeInt(raw, &p.Amount)
		case "currency":
			i, err = 2, decodeString(raw, &p.Currency)
		default:
			if strict {
				return Payment{}, nil, fmt.Errorf("payment: unknown field %q", clip(name))
			}
			unknown = append(unknown, clip(name))
			continue
		}
		if seen[i] {
			return Payment{}, nil, fmt.Errorf("payment: duplicate field %q", name)
		}
		seen[i] = true
		if err != nil {
			return Payment{}, nil, fmt.Errorf("payment: %s %w", name, err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return Payment{}, nil, fmt.Errorf("payment: %w", syntaxErr(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Payment{}, nil, errors.New("payment: trailing data after the object")
	}
	for i, name := range [3]string{"payment_id", "amount", "currency"} {
		if !seen[i] {
			return Payment{}, nil, fmt.Errorf("payment: %s is missing", name)
		}
	}
	if err := p.Validate(); err != nil {
		return Payment{}, nil, fmt.Errorf("payment: %w", err)
	}
	return p, unknown, nil
}

func syntaxErr(err error) error {
	if errors.Is(err, io.EOF) {
		return errors.New("unexpected end of JSON input")
	}
	return err
}

func decodeString(raw json.RawMessage, dst *string) error {
	if len(raw) == 0 || raw[0] != '"' {
		return errors.New("must be a JSON string")
	}
	return json.Unmarshal(raw, dst)
}

func decodeInt(raw json.RawMessage, dst *int64) error {
	s := string(raw)
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return errors.New("must be a JSON integer")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("is out of range")
	}
	*dst = n
	return nil
}
