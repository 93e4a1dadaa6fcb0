package once

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/claimfirst/claimfirst/claimstore"
)

// Codec turns a typed result into the string stored with the claim, and a
// stored string back into a value. Implementations are safe for concurrent
// use.
type Codec interface {
	// Encode returns v's stored form.
	Encode(v any) (string, error)
	// Decode fills the value v points to from its stored form s, or fails:
	// it never leaves a silent zero for a value it cannot read.
	Decode(s string, v any) error
}

// JSONCodec is the default Codec: encoding/json, decoding strictly (a field
// the type does not have, or anything after the value, is an error), so a
// result stored by an older version of the type is reported, not half read.
type JSONCodec struct{}

// Encode implements Codec.
func (JSONCodec) Encode(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// Decode implements Codec.
func (JSONCodec) Decode(s string, v any) error {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the value")
	}
	return nil
}

// ErrUndecodable means a stored result does not decode into the caller's
// type (the type changed since it was stored, or it was stored as plain
// text): the work is done, its result is not readable as asked. The error
// is a *DecodeError.
var ErrUndecodable = errors.New("once: stored result does not decode")

// DecodeError is the error of a replay whose stored result does not decode.
// It matches ErrUndecodable.
type DecodeError struct {
	// Key is the key.
	Key string
	// Type is the Go type asked for.
	Type string
	// Stored is the stored result.
	Stored string
	// Err is the codec's error.
	Err error
}

// Error implements error.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("once: stored result of key %q does not decode into %s: %v", e.Key, e.Type, e.Err)
}

// Is reports whether target is ErrUndecodable.
func (e *DecodeError) Is(target error) bool { return target == ErrUndecodable }

// Unwrap returns the codec's error.
func (e *DecodeError) Unwrap() error { return e.Err }

// ValueFunc is the work of RunValue: Func with a result of the caller's type.
type ValueFunc[T any] func(ctx context.Context, c Call) (T, error)

// Value is what RunValue returns on success.
type Value[T any] struct {
	// Value is the function's result, or the stored result of an earlier
	// call, decoded.
	Value T
	// Replayed reports that Value is the stored result of an earlier call:
	// the function did not run.
	Replayed bool
	// Token is the fencing token of the claim the value came from.
	Token int64
}

// DoValue is Do for a result of type T, stored with opts.Codec.
func DoValue[T any](ctx context.Context, store claimstore.Store, key string, opts Options, fn ValueFunc[T]) (T, error) {
	r, err := RunValue(ctx, store, key, opts, fn)
	return r.Value, err
}

// RunValue is Run for a result of type T: fn's result is encoded with
// opts.Codec (JSONCodec unless set) and stored with the completed claim, and a replay decodes
// the stored result into a T. The first call returns the value as a replay
// would see it (encoded and decoded), so both agree. A result that does not
// survive the trip (it does not encode, or does not decode as encoded) is
// not stored, but fn's work was done: the claim is completed with a marker
// that says so, the first call returns fn's value with an *EncodeError
// (ErrUnencodable), and later calls that error alone, without running fn.
// A result too large to store is returned to the first call with its
// *ResultTooLargeError, as by Run. A replay whose stored result no longer
// decodes returns a *DecodeError (ErrUndecodable) and the zero T, never a
// silent zero. Other errors are Run's.
func RunValue[T any](ctx context.Context, store claimstore.Store, key string, opts Options, fn ValueFunc[T]) (Value[T], error) {
	codec := opts.Codec
	if codec == nil {
		codec = JSONCodec{}
	}
	var fresh T
	var notEncoded *EncodeError
	r, err := Run(ctx, store, key, opts, func(ctx context.Context, c Call) (string, error) {
		v, err := fn(ctx, c)
		if err != nil {
			return "", err
		}
		s, back, ee := encode(codec, key, c.Token, v)
		if ee != nil {
			// The work is done: complete the claim with the marker, so
			// that it is never done again.
			fresh, notEncoded = v, ee
			return ee.Stored(), nil
		}
		fresh = back
		return s, nil
	})
	switch {
	case err == nil && notEncoded != nil && !r.Replayed:
		return Value[T]{Value: fresh, Token: r.Token}, notEncoded
	case errors.Is(err, ErrResultTooLarge) && !r.Replayed && r.Token != 0:
		return Value[T]{Value: fresh, Token: r.Token}, err
	case err != nil && r.Replayed:
		return Value[T]{Replayed: true, Token: r.Token}, err // the result was not stored
	case err != nil:
		return Value[T]{}, err
	}
	if !r.Replayed {
		return Value[T]{Value: fresh, Token: r.Token}, nil
	}
	var v T
	if err := codec.Decode(r.Value, &v); err != nil {
		return Value[T]{}, &DecodeError{Key: key, Type: reflect.TypeFor[T]().String(), Stored: r.Value, Err: err}
	}
	return Value[T]{Value: v, Replayed: true, Token: r.Token}, nil
}

// Encode encodes v with codec (nil: JSONCodec) and checks that it decodes
// back into a T. If it does not, the result cannot be stored: the
// *EncodeError for key and token says why, and its Stored is what the
// claim is completed with instead. It is for a door's own typed adapter,
// as the worker's ValueHandler is one.
func Encode[T any](codec Codec, key string, token int64, v T) (string, *EncodeError) {
	s, _, ee := encode(codec, key, token, v)
	return s, ee
}

// encode is Encode that also returns the value decoded back.
func encode[T any](codec Codec, key string, token int64, v T) (string, T, *EncodeError) {
	if codec == nil {
		codec = JSONCodec{}
	}
	var back T
	s, err := codec.Encode(v)
	if err == nil {
		if derr := codec.Decode(s, &back); derr != nil {
			err = fmt.Errorf("does not decode as encoded: %w", derr)
		}
	}
	if err == nil {
		return s, back, nil
	}
	return "", back, &EncodeError{Key: key, Token: token, Type: reflect.TypeFor[T]().String(), Reason: truncateRunes(err.Error(), maxEncodeReason), Err: err}
}

// ErrUnencodable means a function succeeded but its typed result did not
// make the trip through the codec (it does not encode, such as a NaN in
// JSON, or does not decode as encoded). The work was done: its claim is
// completed without the result, with a marker that says so, and it never
// runs again for the key. The first call returns the value with the
// error, later calls the error alone. The error is an *EncodeError.
var ErrUnencodable = errors.New("once: result does not encode")

// EncodeError is the error of a call whose typed result was not stored
// because the codec refused it. It matches ErrUnencodable.
type EncodeError struct {
	// Key is the key.
	Key string
	// Token is the fencing token of the claim the result came from.
	Token int64
	// Type is the result's Go type.
	Type string
	// Reason is the codec's error as stored with the claim.
	Reason string
	// Err is the codec's error, for the call that ran the function; nil
	// for later calls, which have Reason.
	Err error
}

// Error implements error.
func (e *EncodeError) Error() string {
	return fmt.Sprintf("once: key %q token %d: the result (%s) does not encode: %s: the work was done and is not done again",
		e.Key, e.Token, e.Type, e.Reason)
}

// Is reports whether target is ErrUnencodable.
func (e *EncodeError) Is(target error) bool { return target == ErrUnencodable }

// Unwrap returns the codec's error.
func (e *EncodeError) Unwrap() error { return e.Err }

// Stored returns the marker a claim is completed with in place of the
// result that did not encode: it says so, with the type and the reason,
// which a later call reads back as an *EncodeError.
func (e *EncodeError) Stored() string {
	return notEncodedPrefix + e.Type + ":" + e.Reason
}

// notEncodedPrefix starts EncodeError.Stored's marker; like
// claimstore.OmittedResult's, the control character U+001F keeps it apart
// from any result a caller means.
const notEncodedPrefix = "\x1fclaimfirst:result-not-encoded:"

// maxEncodeReason bounds the codec's error kept in the marker.
const maxEncodeReason = 512

// notEncoded returns the *EncodeError of a stored result that is the
// marker of a result that did not encode, or nil.
func notEncoded(key string, token int64, stored string) *EncodeError {
	rest, ok := strings.CutPrefix(stored, notEncodedPrefix)
	if !ok {
		return nil
	}
	typ, reason, _ := strings.Cut(rest, ":")
	return &EncodeError{Key: key, Token: token, Type: typ, Reason: reason}
}

// truncateRunes cuts s to at most n bytes on a rune boundary.
func truncateRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
