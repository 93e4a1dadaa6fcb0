package sim

import (
	"fmt"
	"testing"
	"testing/synctest"
)

// Run runs cfg's world in a synctest bubble (virtual time: hours of leases
// and backoffs pass in milliseconds) and fails t with the violations, the
// command that reruns the seed and the history of the first key that
// broke. It returns the result for further checks.
func Run(t *testing.T, cfg Config) *Result {
	t.Helper()
	var r *Result
	synctest.Test(t, func(*testing.T) { r = Simulate(cfg) })
	if r != nil && len(r.Violations) > 0 {
		rerun := cfg.Rerun
		if rerun == "" {
			rerun = fmt.Sprintf("go test -run '^%s$' -count=1 .", t.Name())
		}
		t.Error(r.Report(rerun))
	}
	return r
}

// Simulated runs cfg's world in a synctest bubble and returns its result
// without failing t on violations: for tests that expect some (a mutant).
func Simulated(t *testing.T, cfg Config) *Result {
	t.Helper()
	var r *Result
	synctest.Test(t, func(*testing.T) { r = Simulate(cfg) })
	return r
}
