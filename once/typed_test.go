package once_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/keyexpr"
	"github.com/claimfirst/claimfirst/once"
)

type receipt struct {
	ChargeID string `json:"charge_id"`
	Amount   int64  `json:"amount"`
}

func TestRunValueReplaysTheType(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store, key string) {
		ctx := context.Background()
		runs := 0
		fn := func(context.Context, once.Call) (receipt, error) {
			runs++
			return receipt{ChargeID: "ch_1", Amount: 1999}, nil
		}
		first, err := once.RunValue(ctx, s, key, once.Options{}, fn)
		if err != nil || first.Replayed || first.Value != (receipt{"ch_1", 1999}) {
			t.Fatalf("first call = %+v, %v", first, err)
		}
		again, err := once.RunValue(ctx, s, key, once.Options{}, fn)
		if err != nil || !again.Replayed || again.Value != first.Value || again.Token != first.Token || runs != 1 {
			t.Fatalf("repeat = %+v, %v after %d runs; want the first value replayed, one run", again, err, runs)
		}
		// A pointer type replays as well.
		p, err := once.DoValue(ctx, s, key, once.Options{}, func(context.Context, once.Call) (*receipt, error) {
			t.Error("ran again")
			return nil, nil
		})
		if err != nil || p == nil || *p != first.Value {
			t.Fatalf("DoValue[*receipt] = %v, %v", p, err)
		}
	})
}

func TestRunValueUndecodable(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store, key string) {
		ctx := context.Background()
		// Stored by an older version of the program: a string, then a type
		// with another field.
		if _, err := once.Do(ctx, s, key, once.Options{}, func(context.Context, once.Call) (string, error) {
			return "ch_plain", nil
		}); err != nil {
			t.Fatal(err)
		}
		v, err := once.DoValue(ctx, s, key, once.Options{}, func(context.Context, once.Call) (receipt, error) {
			t.Error("ran again")
			return receipt{}, nil
		})
		var de *once.DecodeError
		if !errors.Is(err, once.ErrUndecodable) || !errors.As(err, &de) || de.Stored != "ch_plain" || de.Type != "once_test.receipt" {
			t.Fatalf("DoValue on a plain string = %+v, %v; want a DecodeError", v, err)
		}
		type renamed struct {
			Charge string `json:"charge"`
		}
		_, err = once.DoValue(ctx, s, key+"-2", once.Options{}, func(context.Context, once.Call) (receipt, error) {
			return receipt{ChargeID: "ch_2", Amount: 5}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		r, err := once.DoValue(ctx, s, key+"-2", once.Options{}, func(context.Context, once.Call) (renamed, error) {
			t.Error("ran again")
			return renamed{}, nil
		})
		if !errors.Is(err, once.ErrUndecodable) || r != (renamed{}) || !strings.Contains(err.Error(), "charge_id") {
			t.Fatalf("DoValue into a changed type = %+v, %v; want ErrUndecodable naming the unknown field", r, err)
		}
	})
}

// badCodec encodes a result it cannot decode.
type badCodec struct{}

func (badCodec) Encode(any) (string, error) { return "?", nil }
func (badCodec) Decode(string, any) error   { return errors.New("cannot read ?") }

// measured has a float field: NaN does not encode as JSON.
type measured struct {
	ChargeID string  `json:"charge_id"`
	Ratio    float64 `json:"ratio"`
}

// TestRunValueResultThatDoesNotEncodeRunsOnce: a function whose effect
// happened but whose result does not make the trip through the codec (a
// NaN JSON refuses; a codec that cannot read its own output) runs once.
// Its claim is completed with the marker of a result not stored, never
// released: the first call gets its value and the error, later calls the
// error alone, without running it.
func TestRunValueResultThatDoesNotEncodeRunsOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		codec  once.Codec
		value  measured
		reason string
	}{
		{"NaN", nil, measured{ChargeID: "ch_1", Ratio: math.NaN()}, "unsupported value"},
		{"does not decode as encoded", badCodec{}, measured{ChargeID: "ch_1"}, "cannot read ?"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, s claimstore.Store, key string) {
				ctx := context.Background()
				var runs atomic.Int32
				fn := func(context.Context, once.Call) (measured, error) {
					runs.Add(1)
					return tc.value, nil
				}
				var vs [3]once.Value[measured]
				var errs [3]error
				for i := range vs {
					vs[i], errs[i] = once.RunValue(ctx, s, key, once.Options{Codec: tc.codec}, fn)
				}
				if n := runs.Load(); n != 1 {
					t.Fatalf("the function ran %d times in 3 calls, want 1 (errors %v)", n, errs)
				}
				var ee *once.EncodeError
				if !errors.Is(errs[0], once.ErrUnencodable) || !errors.As(errs[0], &ee) || ee.Err == nil ||
					!strings.Contains(errs[0].Error(), tc.reason) || vs[0].Value.ChargeID != "ch_1" || vs[0].Replayed || vs[0].Token != 1 {
					t.Fatalf("first call = %+v, %v; want the value and an *EncodeError saying %q", vs[0], errs[0], tc.reason)
				}
				if once.IsPermanent(errs[0]) {
					t.Errorf("first call's error %v is permanent: the work succeeded", errs[0])
				}
				for i := 1; i < len(vs); i++ {
					if !errors.As(errs[i], &ee) || ee.Type != "once_test.measured" || !strings.Contains(ee.Reason, tc.reason) ||
						!vs[i].Replayed || vs[i].Token != 1 || vs[i].Value != (measured{}) {
						t.Errorf("later call %d = %+v, %v; want the stored EncodeError, replayed, token 1", i, vs[i], errs[i])
					}
				}
				c, err := s.Get(ctx, key)
				if err != nil || c.Status != claimstore.StatusCompleted {
					t.Fatalf("claim = %+v, %v; want it completed, not released", c, err)
				}
				// A plain Run sees the marker as an error too, never as a value.
				r, err := once.Run(ctx, s, key, once.Options{}, func(context.Context, once.Call) (string, error) {
					t.Error("ran again")
					return "", nil
				})
				if !errors.Is(err, once.ErrUnencodable) || r.Value != "" || !r.Replayed {
					t.Errorf("Run after = %+v, %v; want ErrUnencodable", r, err)
				}
			})
		})
	}
}

// TestRunValueResultTooLargeKeepsTheValue: a typed result too large to
// store is returned to the call that made it, with ErrResultTooLarge, as
// Run returns a string result.
func TestRunValueResultTooLargeKeepsTheValue(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Config{})
	big := strings.Repeat("r", claimstore.MaxResultBytes)
	runs := 0
	fn := func(context.Context, once.Call) (receipt, error) {
		runs++
		return receipt{ChargeID: big, Amount: 1}, nil
	}
	v, err := once.RunValue(t.Context(), s, "k", once.Options{}, fn)
	if !errors.Is(err, once.ErrResultTooLarge) || v.Value.ChargeID != big || v.Token != 1 {
		t.Fatalf("first call: %d bytes, token %d, err %v; want the value and ErrResultTooLarge", len(v.Value.ChargeID), v.Token, err)
	}
	v, err = once.RunValue(t.Context(), s, "k", once.Options{}, fn)
	if !errors.Is(err, once.ErrResultTooLarge) || v.Value.ChargeID != "" || !v.Replayed || runs != 1 {
		t.Fatalf("later call: %+v, %v after %d runs; want ErrResultTooLarge, replayed, one run", v.Token, err, runs)
	}
}

// The key and fingerprint of a call come from its payload by expression.
func TestRunValueWithKeyExpression(t *testing.T) {
	t.Parallel()
	e, err := keyexpr.New(keyexpr.Config{Key: "order.id", Fingerprint: "order.amount"})
	if err != nil {
		t.Fatal(err)
	}
	eachBackend(t, func(t *testing.T, s claimstore.Store, prefix string) {
		ctx := context.Background()
		call := func(payload string) (once.Value[receipt], error) {
			x, err := e.Extract([]byte(strings.ReplaceAll(payload, "KEY", prefix)))
			if err != nil {
				return once.Value[receipt]{}, err
			}
			return once.RunValue(ctx, s, x.Key, once.Options{Fingerprint: x.Fingerprint},
				func(context.Context, once.Call) (receipt, error) { return receipt{ChargeID: "ch", Amount: 10}, nil })
		}
		if r, err := call(`{"order":{"id":"KEY","amount":10}}`); err != nil || r.Replayed {
			t.Fatalf("first = %+v, %v", r, err)
		}
		if r, err := call(`{"order":{"id":"KEY","amount":10},"note":"retry"}`); err != nil || !r.Replayed {
			t.Fatalf("repeat = %+v, %v; want a replay", r, err)
		}
		if _, err := call(`{"order":{"id":"KEY","amount":20}}`); !errors.Is(err, once.ErrKeyReused) {
			t.Fatalf("another amount = %v; want ErrKeyReused", err)
		}
	})
}
