package sim_test

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/sim"
)

var (
	seeds = flag.Int("sim.seeds", 200, "how many seeds TestSeeds runs (make test adds a run of 1000 without -race)")
	first = flag.Uint64("sim.first", 0, "the first seed TestSeeds runs")
	one   = flag.Int64("sim.seed", -1, "run only this seed")
	table = flag.Bool("sim.table", false, "print the table on stdout (make sim, worker sim)")
)

// rerun is the command that reruns one seed.
func rerun(seed uint64) string {
	return fmt.Sprintf("go test ./sim -run '^TestSeeds$' -count=1 -sim.seed=%d -v", seed)
}

// TestSeeds runs the real worker in the simulated world under -sim.seeds
// fault schedules and prints a table of what they did.
func TestSeeds(t *testing.T) {
	from, n := *first, uint64(*seeds)
	if *one >= 0 {
		from, n = uint64(*one), 1
	}
	start := time.Now()
	var mu sync.Mutex
	var tot struct {
		seeds, msgs, violations, bursts int
		virtual, burstDrain             time.Duration
		injected                        map[string]int
	}
	tot.injected = map[string]int{}
	t.Run("seeds", func(t *testing.T) {
		for s := from; s < from+n; s++ {
			t.Run(fmt.Sprint(s), func(t *testing.T) {
				t.Parallel()
				r := sim.Run(t, sim.Config{Seed: s, KeyBySeed: true, Rerun: rerun(s)})
				mu.Lock()
				defer mu.Unlock()
				tot.seeds++
				tot.msgs += r.Messages
				tot.virtual += r.Virtual
				tot.violations += len(r.Violations)
				if r.Burst {
					tot.bursts++
					tot.burstDrain = max(tot.burstDrain, r.Drain)
				}
				for k, v := range r.Injected {
					tot.injected[k] += v
				}
				if *one >= 0 {
					t.Logf("seed %d: faults %s, fifo %v, %s virtual, %d messages, injected %v", s, r.Faults, r.FIFO, r.Virtual, r.Messages, r.Injected)
				}
			})
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-22s %v\n", "seeds", tot.seeds)
	fmt.Fprintf(&b, "%-22s %.1f\n", "virtual hours", tot.virtual.Hours())
	fmt.Fprintf(&b, "%-22s %d\n", "messages", tot.msgs)
	fmt.Fprintf(&b, "%-22s %d (longest drain %s)\n", "fifo bursts", tot.bursts, tot.burstDrain)
	for _, k := range slices.Sorted(maps.Keys(tot.injected)) {
		fmt.Fprintf(&b, "%-22s %d\n", "fault "+k, tot.injected[k])
	}
	fmt.Fprintf(&b, "%-22s %d\n", "invariant violations", tot.violations)
	fmt.Fprintf(&b, "%-22s %s\n", "wall time", time.Since(start).Round(time.Millisecond))
	if *table {
		fmt.Print(b.String())
		return
	}
	t.Log(b.String())
}

// TestLambdas runs seeds with every worker a Lambda function, invoked by the
// simulated event source mapping with deadlines, killed at them.
func TestLambdas(t *testing.T) {
	killed, n := 0, 200
	for s := range uint64(n) {
		r := sim.Run(t, sim.Config{Seed: s, Deploy: sim.Lambdas, Rerun: fmt.Sprintf("(sim.Config{Seed: %d, Deploy: sim.Lambdas})", s)})
		killed += r.Injected["lambda_killed"]
	}
	if killed == 0 {
		t.Errorf("no invocation reached its deadline in %d seeds: the deadline is not exercised", n)
	}
	t.Logf("%d seeds, %d invocations killed at their deadline", n, killed)
}
