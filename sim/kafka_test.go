//go:build synctests

// Built with -tags synctests only (make test and make sim do): kgo and kfake
// then block on their mutexes durably, so testing/synctest can move the
// Kafka world's virtual clock (without the tag a seed can stop for good).

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

var kafkaSeeds = flag.Int("sim.kafka", 20, "how many seeds TestKafkaSeeds runs (make test runs more, without -race)")

// kafkaRerun is the command that reruns one Kafka seed.
func kafkaRerun(seed uint64) string {
	return fmt.Sprintf("go test -tags synctests ./sim -run '^TestKafkaSeeds$' -count=1 -sim.seed=%d -v", seed)
}

// TestKafkaSeeds runs real kafkaworker members of a consumer group on
// kfake's virtual network under -sim.kafka fault schedules (-sim.first
// and -sim.seed as for TestSeeds) and prints a table of what they did.
// A group kfake's coordinator left wedged is reported as kfake's, with
// its seed, not as a violation.
func TestKafkaSeeds(t *testing.T) {
	from, n := *first, uint64(*kafkaSeeds)
	if *one >= 0 {
		from, n = uint64(*one), 1
	}
	start := time.Now()
	var mu sync.Mutex
	var tot struct {
		seeds, records, violations int
		virtual                    time.Duration
		wedged                     []string
		injected                   map[string]int
	}
	tot.injected = map[string]int{}
	t.Run("seeds", func(t *testing.T) {
		for s := from; s < from+n; s++ {
			t.Run(fmt.Sprint(s), func(t *testing.T) {
				t.Parallel()
				r := sim.RunKafka(t, sim.KafkaConfig{Seed: s, Rerun: kafkaRerun(s)})
				mu.Lock()
				defer mu.Unlock()
				tot.seeds++
				tot.records += r.Messages
				tot.virtual += r.Virtual
				tot.violations += len(r.Violations)
				if r.Wedged != "" {
					tot.wedged = append(tot.wedged, fmt.Sprintf("seed %d: %s", s, r.Wedged))
				}
				for k, v := range r.Injected {
					tot.injected[k] += v
				}
				if *one >= 0 {
					t.Logf("seed %d: faults %s, %s virtual, %d records, injected %v", s, r.Faults, r.Virtual, r.Messages, r.Injected)
				}
			})
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-22s %v\n", "kafka seeds", tot.seeds)
	fmt.Fprintf(&b, "%-22s %.1f\n", "virtual hours", tot.virtual.Hours())
	fmt.Fprintf(&b, "%-22s %d\n", "records", tot.records)
	for _, k := range slices.Sorted(maps.Keys(tot.injected)) {
		fmt.Fprintf(&b, "%-22s %d\n", "fault "+k, tot.injected[k])
	}
	fmt.Fprintf(&b, "%-22s %d\n", "kfake wedged", len(tot.wedged))
	for _, w := range tot.wedged {
		fmt.Fprintf(&b, "  %s\n", w)
	}
	fmt.Fprintf(&b, "%-22s %d\n", "invariant violations", tot.violations)
	fmt.Fprintf(&b, "%-22s %s\n", "wall time", time.Since(start).Round(time.Millisecond))
	if *table {
		fmt.Print(b.String())
		return
	}
	t.Log(b.String())
}

// kafkaMutants are the faults planted in the Kafka transport that the
// simulator must find, each within its number of seeds (from seed 0), under
// its faults. Unlike the SQS mutants (wrappers around the real code), these
// are planted in kafkaworker itself (internal/plant): when a commit is sent
// is inside the transport, where no wrapper reaches. A commit after revoke
// needs a revoke with a record still running past the grace: the faults
// that move partitions and slow charges.
var kafkaMutants = []struct {
	name   string
	within int
	mutant sim.KafkaMutant
	faults sim.Fault // 0: KafkaFaults
}{
	{"commit before settle", 100, sim.CommitBeforeSettle, 0},
	{"commit after revoke", 300, sim.CommitAfterRevoke, sim.Join | sim.Crash | sim.Lose | sim.ProviderTimeout},
}

// kafkaMutantPasses is how many times TestKafkaMutants runs a mutant's
// seeds before it fails. A seed names its faults, not the goroutines'
// interleaving at one virtual instant, and the planted faults show only in
// some interleavings: commit before settle was caught at seed 23, 44 or
// 122 in eleven of twelve passes of 400 seeds, and in none of the twelfth.
const kafkaMutantPasses = 3

// TestKafkaMutants checks that the Kafka world catches each planted fault
// within its stated number of seeds, in one of kafkaMutantPasses passes,
// and logs where it did.
func TestKafkaMutants(t *testing.T) {
	for _, m := range kafkaMutants {
		t.Run(strings.ReplaceAll(m.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			for pass := 1; pass <= kafkaMutantPasses; pass++ {
				for s := range m.within {
					var r *sim.Result
					t.Run(fmt.Sprintf("%d/%d", pass, s), func(t *testing.T) {
						r = sim.SimulatedKafka(t, sim.KafkaConfig{Seed: uint64(s), Mutant: m.mutant, Faults: m.faults})
					})
					if r != nil && len(r.Violations) > 0 {
						t.Logf("%s: caught at seed %d (%d seeds) in pass %d: %s", m.name, s, s+1, pass, r.Violations[0])
						return
					}
				}
			}
			t.Errorf("%s: not caught within %d seeds in %d passes", m.name, m.within, kafkaMutantPasses)
		})
	}
}
