package sim_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/claimfirst/claimfirst/once"
	"github.com/claimfirst/claimfirst/sim"
)

// mailer is a user's email service and its oracle: emails sent per order.
// With honourKeys it remembers the keys it was sent with, as a provider
// that honours idempotency keys does, and sends once per key.
type mailer struct {
	mu         sync.Mutex
	honourKeys bool
	keys       map[string]bool
	sent       map[string]int
}

func (m *mailer) send(key, order string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.honourKeys && m.keys[key] {
		return
	}
	m.keys[key] = true
	m.sent[order]++
}

// A user's function for package once runs in the simulated world: every
// delivery calls once.Do with the message's key, on a claim table behind
// the seed's faults. once runs the function at most once per claim, but a
// worker that crashes or loses its store between the email and the
// completion leaves a claim that a later delivery takes over, and runs the
// function again: the email goes out twice unless the mail service honours
// the key the function forwards (once.Call.Key).
func ExampleConfig_once() {
	for _, honour := range []bool{false, true} {
		twice := 0
		for seed := range uint64(100) {
			m := &mailer{honourKeys: honour, keys: map[string]bool{}, sent: map[string]int{}}
			cfg := sim.Config{
				Seed: seed,
				Body: func(i int) (string, string) { return fmt.Sprintf("order-%d", i), "" },
				Once: func(ctx context.Context, c once.Call) (string, error) {
					err := sim.Effect(ctx, func() error { m.send(c.Key, c.Key); return nil })
					return "sent", err
				},
				Check: func(*sim.Result) []string {
					m.mu.Lock()
					defer m.mu.Unlock()
					var bad []string
					for order, n := range m.sent {
						if n != 1 {
							bad = append(bad, fmt.Sprintf("%s: %d emails", order, n))
						}
					}
					return bad
				},
			}
			if r := simulate(cfg); len(r.Violations) > 0 {
				twice++
			}
		}
		fmt.Printf("mail service honours the key: %v; some seeds sent an email twice: %v\n", honour, twice > 0)
	}
	// Output:
	// mail service honours the key: false; some seeds sent an email twice: true
	// mail service honours the key: true; some seeds sent an email twice: false
}
