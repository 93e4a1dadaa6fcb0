package once_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/claimfirst/claimfirst/claimstore"
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
		first, err := once.RunValue(ctx, s, key, once.Options{}, nil, fn)
		if err != nil || first.Replayed || first.Value != (receipt{"ch_1", 1999}) {
			t.Fatalf("first call = %+v, %v", first, err)
		}
		again, err := once.RunValue(ctx, s, key, once.Options{}, nil, fn)
		if err != nil || !again.Replayed || again.Value != first.Value || again.Token != first.Token || runs != 1 {
			t.Fatalf("repeat = %+v, %v after %d runs; want the first value replayed, one run", again, err, runs)
		}
		// A pointer type replays as well.
		p, err := once.DoValue(ctx, s, key, once.Options{}, nil, func(context.Context, once.Call) (*receipt, error) {
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
		v, err := once.DoValue(ctx, s, key, once.Options{}, nil, func(context.Context, once.Call) (receipt, error) {
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
		_, err = once.DoValue(ctx, s, key+"-2", once.Options{}, nil, func(context.Context, once.Call) (receipt, error) {
			return receipt{ChargeID: "ch_2", Amount: 5}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		r, err := once.DoValue(ctx, s, key+"-2", once.Options{}, nil, func(context.Context, once.Call) (renamed, error) {
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

func TestRunValueNeverStoresWhatItCannotRead(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s claimstore.Store, key string) {
		ctx := context.Background()
		_, err := once.RunValue(ctx, s, key, once.Options{}, badCodec{}, func(context.Context, once.Call) (int, error) { return 1, nil })
		if !once.IsPermanent(err) || !strings.Contains(err.Error(), "does not decode as encoded") {
			t.Fatalf("RunValue with a codec that cannot read its own output = %v; want a permanent error", err)
		}
		c, err := s.Get(ctx, key)
		if err != nil || c.Status != claimstore.StatusReleased {
			t.Fatalf("claim = %+v, %v; want it released, not completed with an unreadable result", c, err)
		}
	})
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
			return once.RunValue(ctx, s, x.Key, once.Options{Fingerprint: x.Fingerprint}, nil,
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
