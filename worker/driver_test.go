package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/worker"
)

// engine returns the protocol with p's settings for tests that drive it
// as a transport would, without a broker.
func engine(t testing.TB, p worker.Protocol) *worker.Engine {
	t.Helper()
	e, err := worker.NewEngine(p, worker.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// deliver runs m through e with a minute's hold and reports whether the
// delivery is done (acked): anything else a transport would report back
// or leave to come again, as a dead letter with nowhere to go is.
func deliver(e *worker.Engine, m worker.Message) bool {
	if m.Attempt == 0 {
		m.Attempt = 1
	}
	return e.Process(context.Background(), &m, worker.Hold{Until: time.Now().Add(time.Minute)}).Action == worker.Ack
}
