//go:build race

package integration

// raceEnabled says the test binary runs under the race detector: the
// benchmarks then only show they run (`make test` runs each once), their
// numbers meaning nothing, so the longest of them run smaller.
const raceEnabled = true
