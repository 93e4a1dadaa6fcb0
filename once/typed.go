package once

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"

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

// DoValue is Do for a result of type T, stored with codec (nil: JSONCodec).
func DoValue[T any](ctx context.Context, store claimstore.Store, key string, opts Options, codec Codec, fn ValueFunc[T]) (T, error) {
	r, err := RunValue(ctx, store, key, opts, codec, fn)
	return r.Value, err
}

// RunValue is Run for a result of type T: fn's result is encoded with codec
// (nil: JSONCodec) and stored with the completed claim, and a replay decodes
// the stored result into a T. The first call returns the value as a replay
// would see it (encoded and decoded), so both agree; a result that does not
// survive the trip is fn's error, marked Permanent, and the claim is
// released rather than completed with a result no replay could read. A
// replay whose stored result no longer decodes returns a *DecodeError
// (ErrUndecodable) and the zero T, never a silent zero. Other errors are
// Run's.
func RunValue[T any](ctx context.Context, store claimstore.Store, key string, opts Options, codec Codec, fn ValueFunc[T]) (Value[T], error) {
	if codec == nil {
		codec = JSONCodec{}
	}
	var fresh T
	r, err := Run(ctx, store, key, opts, func(ctx context.Context, c Call) (string, error) {
		v, err := fn(ctx, c)
		if err != nil {
			return "", err
		}
		s, err := codec.Encode(v)
		if err != nil {
			return "", Permanent(fmt.Errorf("once: encode result of key %q: %w", key, err))
		}
		if err := codec.Decode(s, &fresh); err != nil {
			return "", Permanent(fmt.Errorf("once: result of key %q does not decode as encoded: %w", key, err))
		}
		return s, nil
	})
	if err != nil {
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
