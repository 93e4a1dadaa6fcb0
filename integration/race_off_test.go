//go:build !race

package integration

// raceEnabled says the test binary runs under the race detector (see
// race_on_test.go).
const raceEnabled = false
