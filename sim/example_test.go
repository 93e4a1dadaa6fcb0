package sim_test

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/claimfirst/claimfirst/sim"
	"github.com/claimfirst/claimfirst/worker"
)

// emails is a user's own side effect and oracle: emails sent per order.
type emails struct {
	mu   sync.Mutex
	sent map[string]int
}

func (e *emails) send(order string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sent[order]++
}

// A user's handler runs in the simulated world under a seed's faults: its
// effect goes through sim.Effect (a crashed worker's effects stop at its
// crash) and its own oracle is checked after the run. This handler sends an
// email for each order, keyed by the order id; the simulator finds that
// crashes, stalls and duplicate deliveries can send one twice, because the
// email is not committed with the claim: a handler whose effect is not
// idempotent must be transactional (worker.Message.Commit) or forward the
// key to a service that honours it.
func ExampleSimulate() {
	failed := 0
	for seed := range uint64(40) {
		var r *sim.Result
		e := &emails{sent: map[string]int{}}
		cfg := sim.Config{
			Seed: seed,
			Body: func(i int) (string, string) { return fmt.Sprintf("order-%d", i), "" },
			Decoder: worker.DecoderFunc(func(m *worker.Message) error {
				if !strings.HasPrefix(m.Body, "order-") {
					return fmt.Errorf("not an order: %q", m.Body)
				}
				m.Key = m.Body
				return nil
			}),
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) (string, error) {
				err := sim.Effect(ctx, func() error { e.send(m.Key); return nil })
				return "sent", err
			}),
			Check: func(r *sim.Result) []string {
				var bad []string
				for order, n := range e.sent {
					if n != 1 {
						bad = append(bad, fmt.Sprintf("%s: %d emails", order, n))
					}
				}
				return bad
			},
		}
		// In a test: r := sim.Run(t, cfg), which also fails t with the
		// violations, the rerun command and the history. An Example has no
		// *testing.T for synctest.Test: simulate makes one.
		r = simulate(cfg)
		if len(r.Violations) > 0 {
			failed++
		}
	}
	fmt.Println("some seeds sent an email twice:", failed > 0)
	// Output:
	// some seeds sent an email twice: true
}

// simulate runs cfg in a synctest bubble from an Example, which has no
// *testing.T of its own, quietly.
func simulate(cfg sim.Config) *sim.Result {
	var r *sim.Result
	v := flag.Lookup("test.v")
	old := v.Value.String()
	_ = v.Value.Set("false")
	defer func() { _ = v.Value.Set(old) }()
	testing.RunTests(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{
		Name: "simulate", F: func(t *testing.T) { r = sim.Simulated(t, cfg) },
	}})
	return r
}
