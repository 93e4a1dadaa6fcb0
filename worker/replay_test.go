package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/cache"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/once"
	"github.com/claimfirst/claimfirst/worker"
)

type receipt struct {
	ChargeID string `json:"charge_id"`
	Amount   int64  `json:"amount"`
}

func TestReplayHookAndTypedResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cached  bool
		sources []string
	}{
		{name: "store", sources: []string{worker.ReplayFromStore, worker.ReplayFromStore}},
		{name: "cache", cached: true, sources: []string{worker.ReplayFromCache, worker.ReplayFromCache}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var store claimstore.Store = memory.New(memory.Config{})
			if tc.cached {
				c, err := cache.New(store, cache.Config{})
				if err != nil {
					t.Fatal(err)
				}
				store = c
			}
			var (
				mu      sync.Mutex
				replays []worker.Replay
			)
			metrics := worker.NewMetrics(nil)
			e := engine(t, worker.Protocol{
				Store: store, Retention: time.Hour, Logger: slog.New(slog.DiscardHandler), Metrics: metrics,
				Handler: worker.ValueHandler[receipt]{Func: func(_ context.Context, m *worker.Message) (receipt, error) {
					return receipt{ChargeID: "ch_" + m.Key, Amount: 1999}, nil
				}},
				OnReplay: func(_ context.Context, r worker.Replay) {
					mu.Lock()
					defer mu.Unlock()
					replays = append(replays, r)
				},
			})
			for i := range 3 {
				if !deliver(e, worker.Message{ID: "m1", Body: "x", Attempt: i + 1, Redelivered: i > 0}) {
					t.Fatalf("delivery %d not done", i+1)
				}
			}
			var sources []string
			for _, r := range replays {
				sources = append(sources, r.Source)
				v, err := worker.DecodeResult[receipt](nil, r.Key, r.Result)
				if err != nil || v != (receipt{ChargeID: "ch_m1", Amount: 1999}) || r.Key != "m1" || r.MessageID != "m1" || r.Token != 1 {
					t.Errorf("replay %+v decodes to %+v, %v", r, v, err)
				}
			}
			if fmt.Sprint(sources) != fmt.Sprint(tc.sources) {
				t.Errorf("replay sources %v, want %v", sources, tc.sources)
			}
			for _, src := range []string{worker.ReplayFromStore, worker.ReplayFromCache} {
				want := int64(0)
				if (src == worker.ReplayFromCache) == tc.cached {
					want = 2
				}
				if n := metrics.Replays(src); n != want {
					t.Errorf("claimfirst_replays_total{source=%q} = %d, want %d", src, n, want)
				}
			}
		})
	}
}

func TestDecodeResultUndecodable(t *testing.T) {
	t.Parallel()
	v, err := worker.DecodeResult[receipt](nil, "k", `{"charge":"ch_1"}`)
	var de *once.DecodeError
	if !errors.Is(err, once.ErrUndecodable) || !errors.As(err, &de) || de.Key != "k" || v != (receipt{}) {
		t.Errorf("DecodeResult of another type's result = %+v, %v; want ErrUndecodable", v, err)
	}
}

// Duplicates absorbed, seen: a callback (and a log line with replayed=true
// and a count by source) for every delivery whose key was done already.
func ExampleReplay() {
	store, err := cache.New(memory.New(memory.Config{}), cache.Config{Size: 10000, TTL: 5 * time.Minute})
	if err != nil {
		panic(err)
	}
	e, err := worker.NewEngine(worker.Protocol{
		Store: store, Retention: 24 * time.Hour, Logger: slog.New(slog.DiscardHandler),
		Handler: worker.ValueHandler[receipt]{Func: func(_ context.Context, m *worker.Message) (receipt, error) {
			return receipt{ChargeID: "ch_1", Amount: 1999}, nil
		}},
		OnReplay: func(_ context.Context, r worker.Replay) {
			v, err := worker.DecodeResult[receipt](nil, r.Key, r.Result)
			fmt.Printf("replayed %s from %s: %+v %v\n", r.Key, r.Source, v, err)
		},
	}, worker.EngineOptions{})
	if err != nil {
		panic(err)
	}
	for i := range 2 { // a delivery and its redelivery, from any transport
		m := &worker.Message{ID: "m1", Body: "{}", Attempt: i + 1}
		e.Process(context.Background(), m, worker.Hold{Until: time.Now().Add(time.Minute)})
	}
	// Output:
	// replayed m1 from cache: {ChargeID:ch_1 Amount:1999} <nil>
}
