package worker

import (
	"context"
	"errors"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimfirst/claimfirst/once"
)

// Replay describes a delivery whose key was completed already: the worker
// acked it without running the handler, and Result is the stored result.
type Replay struct {
	// MessageID is the delivery's message id.
	MessageID string
	// Key is the idempotency key.
	Key string
	// Token is the fencing token of the claim that completed the key.
	Token int64
	// Result is the result stored with the completion (see DecodeResult for
	// a ValueHandler's).
	Result string
	// Envelope is Message.Envelope: the envelopes the body came in.
	Envelope string
	// Attempt is the delivery's Message.Attempt.
	Attempt int
	// Source says what answered: ReplayFromStore or ReplayFromCache (a
	// claimstore/cache in front of the store, without a request to it).
	Source string
}

// The sources of a replay, as logged (replay_source) and counted
// (claimfirst_replays_total{source}).
const (
	ReplayFromStore = "store"
	ReplayFromCache = "cache"
)

// replayed builds the Replay of m from once's answer.
func replayed(m *Message, r once.Result) Replay {
	src := ReplayFromStore
	if r.Cached {
		src = ReplayFromCache
	}
	return Replay{MessageID: m.ID, Key: m.Key, Token: r.Token, Result: r.Value, Envelope: m.Envelope,
		Attempt: m.Attempt, Source: src}
}

// newReplays is the counter of replays by source.
func newReplays() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "claimfirst_replays_total",
		Help: "Deliveries of keys completed already, acked without running the handler, by what answered (store: the claim store; cache: a local cache of completed keys, without a request).",
	}, []string{"source"})
	c.WithLabelValues(ReplayFromStore)
	c.WithLabelValues(ReplayFromCache)
	return c
}

// Replays returns the number of replays counted from source, for tests and
// the benchmark.
func (m *Metrics) Replays(source string) int64 {
	c, err := m.replays.GetMetricWithLabelValues(source)
	if err != nil {
		return 0
	}
	return int64(counterValue(c))
}

// ValueHandler adapts a function whose result is a value of type T to
// Handler: the value is encoded with Codec and stored with the completed
// claim, and duplicates' Replay.Result decodes back into a T with
// DecodeResult. A value that does not survive encoding and decoding (a
// NaN in JSON) is not stored, but the work was done: the claim is
// completed with the marker of a result not stored (once.EncodeError's
// Stored), the message acked and counted in
// claimfirst_results_not_stored_total, and its duplicates acked without
// running Func, as for a result too large.
type ValueHandler[T any] struct {
	// Func does the message's work. Required.
	Func func(ctx context.Context, m *Message) (T, error)
	// Codec encodes the result, as once.Options.Codec does for
	// once.RunValue: the same field in both. Defaults to once.JSONCodec.
	Codec once.Codec
}

// Handle implements Handler. A result that does not encode comes back as
// its marker with a *once.EncodeError (once.ErrUnencodable), which the
// worker completes the claim with.
func (h ValueHandler[T]) Handle(ctx context.Context, m *Message) (string, error) {
	v, err := h.Func(ctx, m)
	if err != nil {
		return "", err
	}
	s, ee := once.Encode(h.Codec, m.Key, m.Token, v)
	if ee != nil {
		return ee.Stored(), ee
	}
	return s, nil
}

// notEncoded returns the *once.EncodeError of a handler's error that says
// its work succeeded but its result did not encode (ValueHandler), or nil.
// Made Permanent, it is a failure like any other.
func notEncoded(err error) *once.EncodeError {
	var ee *once.EncodeError
	if err == nil || IsPermanent(err) || !errors.As(err, &ee) {
		return nil
	}
	return ee
}

// DecodeResult decodes a stored result (Replay.Result) into a T with codec
// (nil: once.JSONCodec). A result that does not decode is a
// *once.DecodeError (once.ErrUndecodable), never a silent zero.
func DecodeResult[T any](codec once.Codec, key, stored string) (T, error) {
	if codec == nil {
		codec = once.JSONCodec{}
	}
	var v T
	if err := codec.Decode(stored, &v); err != nil {
		var zero T
		return zero, &once.DecodeError{Key: key, Type: reflect.TypeFor[T]().String(), Stored: stored, Err: err}
	}
	return v, nil
}
