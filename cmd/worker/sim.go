package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// simPackage is the simulator's test package, which `worker sim` runs.
const simPackage = "github.com/claimfirst/claimfirst/sim"

// cmdSim runs the simulator's soak. The simulated world runs in a
// testing/synctest bubble (its virtual clock is what makes hours of leases
// pass in milliseconds), and a bubble exists only inside a test, so the
// command runs the sim package's TestSeeds with `go test`: it needs the Go
// toolchain and this module's source (run it from a checkout).
func cmdSim(ctx context.Context, args []string, io stdio) error {
	s := newSettings("sim", io)
	seeds := s.Int("seeds", "SIM_SEEDS", 1000, "how many seeds (fault schedules) to run")
	first := s.Int("first", "SIM_FIRST", 0, "the first seed")
	s.fs.Usage = func() {
		fmt.Fprint(s.fs.Output(), `Usage: worker sim [flags]

Runs the real worker, once and claim code in the simulated SQS, claim store
and payment provider of package sim, under one fault schedule per seed, and
prints a table: seeds, virtual hours, messages, faults injected by kind,
invariant violations, wall time. A failing seed prints the command that
reruns it and the history of the message that broke. Needs the Go toolchain
and a checkout of this module (it runs go test on package sim).

`)
		s.fs.PrintDefaults()
	}
	if err := s.Parse(args); err != nil {
		return err
	}
	if *seeds < 1 || *first < 0 {
		return usagef("sim: -seeds %d must be at least 1 and -first %d not negative", *seeds, *first)
	}
	cmd := exec.CommandContext(ctx, "go", "test", "-v", "-count=1", "-timeout=0", "-run=^TestSeeds$", simPackage,
		"-args", "-sim.seeds="+strconv.Itoa(*seeds), "-sim.first="+strconv.Itoa(*first), "-sim.table")
	cmd.Stderr, cmd.Env = io.stderr, os.Environ()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("sim: go test: %w", err)
	}
	// -v shows the table (a passing test's output is otherwise hidden); the
	// per-seed lines are left out, failures are not.
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if t := strings.TrimLeft(line, " "); strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- PASS") || t == "PASS" {
			continue
		}
		fmt.Fprintln(io.stdout, line)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}
