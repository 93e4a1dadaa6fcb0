package demo

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// payments is the size of the experiments in tests: small, yet 1 in 50 is 8.
const testPayments = 400

func TestRace(t *testing.T) {
	t.Parallel()
	// The race between the two copies is real, not staged: on a loaded
	// machine a duplicate may find its first copy already remembered. Every
	// measurement must show the invariants; one of a few must show the race.
	const tries = 3
	raced := false
	for try := 1; try <= tries && !raced; try++ {
		res, err := runRace(t.Context(), Options{Payments: testPayments, Seed: int64(try)})
		if err != nil {
			t.Fatal(err)
		}
		deliveries := testPayments + testPayments/20
		for _, r := range []raceRow{res.NoDedup, res.CheckThenAct, res.ClaimFirst} {
			if r.Deliveries != deliveries || r.Payments != testPayments {
				t.Fatalf("deliveries %d, payments %d; want %d, %d", r.Deliveries, r.Payments, deliveries, testPayments)
			}
		}
		if res.NoDedup.Charges != deliveries {
			t.Errorf("no deduplication: charges %d, want one per delivery, %d", res.NoDedup.Charges, deliveries)
		}
		if c := res.CheckThenAct.Charges; c < testPayments || c > deliveries {
			t.Errorf("check, charge, then remember: charges %d, want %d to %d", c, testPayments, deliveries)
		}
		if res.ClaimFirst.Charges != testPayments {
			t.Errorf("claim first: charges %d, want exactly one per payment, %d", res.ClaimFirst.Charges, testPayments)
		}
		if res.ClaimFirst.Receives <= deliveries {
			t.Errorf("claim first: receives %d, want more than %d deliveries: a copy that finds the claim held is deferred and received again",
				res.ClaimFirst.Receives, deliveries)
		}
		raced = res.CheckThenAct.Charges > testPayments
		t.Logf("try %d: check, charge, then remember charged %d for %d payments", try, res.CheckThenAct.Charges, testPayments)
	}
	if !raced {
		t.Errorf("check, charge, then remember charged each payment once in %d tries: the duplicates never raced the first copies", tries)
	}
}

func TestRelease(t *testing.T) {
	t.Parallel()
	res, err := runRelease(t.Context(), Options{Payments: testPayments, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	failed := testPayments / 50
	keep, rel := res.ClaimThenCharge, res.ReleaseOnFailure
	for _, r := range []releaseRow{keep, rel} {
		if r.Payments != testPayments || r.FailedFirst != failed {
			t.Fatalf("payments %d, first attempts failed %d; want %d, %d", r.Payments, r.FailedFirst, testPayments, failed)
		}
	}
	if keep.Charges != testPayments-failed || keep.Skipped != failed || keep.Takeovers != 0 {
		t.Errorf("claim, then charge: charges %d, skipped %d, takeovers %d; want %d, %d, 0",
			keep.Charges, keep.Skipped, keep.Takeovers, testPayments-failed, failed)
	}
	if rel.Charges != testPayments || rel.Skipped != 0 || rel.Takeovers != failed {
		t.Errorf("release on failure: charges %d, skipped %d, takeovers %d; want %d, 0, %d",
			rel.Charges, rel.Skipped, rel.Takeovers, testPayments, failed)
	}
}

func TestLease(t *testing.T) {
	t.Parallel()
	res, err := runLease(t.Context(), Options{Payments: testPayments, Seed: 3})
	checkLease(t, res, err, testPayments)
}

func checkLease(t *testing.T, res leaseResult, err error, payments int) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	crashed := payments / 50
	without, with := res.WithoutLease, res.WithLease
	for _, r := range []leaseRow{without, with} {
		if r.Payments != payments || r.Crashed != crashed {
			t.Fatalf("payments %d, crashed %d; want %d, %d", r.Payments, r.Crashed, payments, crashed)
		}
	}
	if without.Charges != payments-crashed || without.DeadLettered != crashed || without.Takeovers != 0 {
		t.Errorf("claim without lease: charges %d, dead-lettered %d, takeovers %d; want %d, %d, 0",
			without.Charges, without.DeadLettered, without.Takeovers, payments-crashed, crashed)
	}
	if with.Charges != payments || with.DeadLettered != 0 || with.Takeovers != crashed {
		t.Errorf("claim with lease: charges %d, dead-lettered %d, takeovers %d; want %d, 0, %d",
			with.Charges, with.DeadLettered, with.Takeovers, payments, crashed)
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	// A charge whose answer outlasts the client's timeout is charged again
	// without the key, so the injected timeouts must be the only ones.
	opts := WithAttemptTimeout(Options{Payments: testPayments, Seed: 5}, time.Second)
	res, err := runKey(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	timeouts := testPayments / 50
	without, with := res.WithoutKey, res.WithKey
	for _, r := range []keyRow{without, with} {
		if r.Payments != testPayments || r.Timeouts != timeouts {
			t.Fatalf("payments %d, timeouts %d; want %d, %d", r.Payments, r.Timeouts, testPayments, timeouts)
		}
	}
	if without.Charges != testPayments+timeouts || without.Replays != 0 {
		t.Errorf("retry without key: charges %d, replays %d; want %d, 0", without.Charges, without.Replays, testPayments+timeouts)
	}
	if with.Charges != testPayments || with.Replays < timeouts {
		t.Errorf("retry with key: charges %d, replays %d; want %d, at least %d", with.Charges, with.Replays, testPayments, timeouts)
	}
}

// TestSeed checks that the seed, not chance, chooses the faulty payments:
// the counts of the deterministic experiments repeat exactly.
func TestSeed(t *testing.T) {
	t.Parallel()
	opts := Options{Payments: 100, Seed: 11}
	a, err := runRelease(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := runRelease(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("same seed, different results:\n%+v\n%+v", a, b)
	}
}

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		opts Options
		want string
	}{
		{Options{Payments: MinPayments - 1}, "Payments"},
		{Options{Payments: MaxPayments + 1}, "Payments"},
		{Options{Workers: 1}, "Workers"},
		{Options{Experiment: Experiments + 1}, "Experiment"},
		{Options{Experiment: -1}, "Experiment"},
	}
	for _, tc := range tests {
		err := Run(context.Background(), tc.opts, new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error naming %s", tc.opts, err, tc.want)
		}
	}
}

// row is a table row as the README shows it: a label, two or more
// spaces, then "name number" pairs separated by two or more spaces, then the
// mark: "ok", "double N", "lost N" or "double N, lost M".
var (
	rowRE  = regexp.MustCompile(`^(\S+(?: \S+)*)  +(\S.*)$`)
	pairRE = regexp.MustCompile(`^([a-z]+(?: [a-z]+)*) ([0-9]+)$`)
	markRE = regexp.MustCompile(`^(?:ok|double ([0-9]+)(?:, lost ([0-9]+))?|lost ([0-9]+))$`)
)

type parsedRow struct {
	label        string
	names        []string
	pairs        map[string]int
	mark         string
	double, lost int
}

func parseRow(line string) (parsedRow, bool) {
	m := rowRE.FindStringSubmatch(line)
	if m == nil {
		return parsedRow{}, false
	}
	r := parsedRow{label: m[1], pairs: map[string]int{}}
	var cells []string
	for cell := range strings.SplitSeq(m[2], "   ") {
		if cell = strings.TrimSpace(cell); cell != "" {
			cells = append(cells, cell)
		}
	}
	if len(cells) < 2 {
		return parsedRow{}, false
	}
	r.mark = cells[len(cells)-1]
	mm := markRE.FindStringSubmatch(r.mark)
	if mm == nil {
		return parsedRow{}, false
	}
	r.double, _ = strconv.Atoi(mm[1])
	r.lost, _ = strconv.Atoi(mm[2] + mm[3])
	for _, cell := range cells[:len(cells)-1] {
		p := pairRE.FindStringSubmatch(cell)
		if p == nil {
			return parsedRow{}, false
		}
		n, err := strconv.Atoi(p[2])
		if err != nil {
			return parsedRow{}, false
		}
		r.names = append(r.names, p[1])
		r.pairs[p[1]] = n
	}
	return r, true
}

// parseOutput splits Run's output into its headings and table rows, and
// reports any line with two spaces in a row that is not a row.
func parseOutput(t *testing.T, out string) (headings []string, rows []parsedRow) {
	t.Helper()
	for line := range strings.SplitSeq(strings.TrimRight(out, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "Experiment "):
			headings = append(headings, line)
		case strings.Contains(line, "  "):
			r, ok := parseRow(line)
			if !ok {
				t.Errorf("line %q has two spaces in a row but is not a label, pairs and a mark", line)
				continue
			}
			rows = append(rows, r)
		}
	}
	return headings, rows
}

// kafkaNames are experiment 9's pair names.
var kafkaNames = []string{"records", "payments", "read again", "charges", "uncommitted"}

// TestRunOutput checks the printed tables' shape and that their numbers are
// the measured ones: every table row parses as a label, pairs and a mark, the
// labels and pair names are those of the README, every experiment
// has a heading on one line, every mark agrees with its row's numbers, and no
// line that is not a row looks like one.
func TestRunOutput(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	const n = 100
	opts := WithAttemptTimeout(Options{Payments: n, Seed: 2}, time.Second)
	if err := Run(t.Context(), opts, &out); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		label string
		names []string
		// effects is the row's effects (charges, units shipped, entries);
		// -1 where the race decides.
		effects int
		// ok is whether the row must be marked ok.
		ok bool
	}{
		{"no deduplication", []string{"deliveries", "payments", "charges"}, n + n/20, false},
		{"check, charge, then remember", []string{"deliveries", "payments", "charges"}, -1, false},
		{"claim first, atomically", []string{"deliveries", "payments", "charges"}, n, true},
		{"claim, then charge", []string{"payments", "first attempts failed", "charges"}, n - n/50, false},
		{"claim, charge, release on failure", []string{"payments", "first attempts failed", "charges"}, n, true},
		{"claim without lease", []string{"payments", "crashed", "charges"}, n - n/50, false},
		{"claim with lease", []string{"payments", "crashed", "charges"}, n, true},
		{"retry without key", []string{"payments", "timeouts", "charges"}, n + n/50, false},
		{"retry with idempotency key", []string{"payments", "timeouts", "charges"}, n, true},
		{"increment on each delivery", []string{"deliveries", "orders", "shipped"}, n + n/20, false},
		{"set the new state", []string{"deliveries", "orders", "shipped"}, n, true},
		{"conditional state transition", []string{"deliveries", "orders", "shipped"}, n, true},
		{"claims kept 1 hour", []string{"payments", "late duplicates", "charges"}, n + n/20, false},
		{"claims kept past queue retention", []string{"payments", "late duplicates", "charges"}, n, true},
		{"write, then complete", []string{"payments", "crashed", "ledger entries"}, n + n/50, false},
		{"one transaction", []string{"payments", "crashed", "ledger entries"}, n, true},
		{"retry with the forgotten key", []string{"payments", "late retries", "charges"}, n + n/50, false},
		{"look up before charging", []string{"payments", "late retries", "charges"}, n, true},
		{"charge, then commit", kafkaNames, -1, false},
		{"claim first (kafkaworker)", kafkaNames, n, true},
	}
	headings, rows := parseOutput(t, out.String())
	if k := rows[len(rows)-1]; k.label == "claim first (kafkaworker)" && k.pairs["uncommitted"] != 0 {
		t.Errorf("row %q: uncommitted %d, want 0: committed offsets equal end offsets", k.label, k.pairs["uncommitted"])
	}
	if len(headings) != Experiments {
		t.Errorf("%d headings, want %d:\n%s", len(headings), Experiments, out.String())
	}
	for i, h := range headings {
		if !strings.HasPrefix(h, fmt.Sprintf("Experiment %d: ", i+1)) {
			t.Errorf("heading %d is %q", i+1, h)
		}
	}
	if !slices.Contains(headings, "Experiment 6: how long to remember: 5 duplicates arrive two hours late (simulated clock)") {
		t.Errorf("experiment 6's heading does not count %d late duplicates: %q", n/20, headings)
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(want), out.String())
	}
	for i, w := range want {
		r := rows[i]
		if r.label != w.label || fmt.Sprint(r.names) != fmt.Sprint(w.names) {
			t.Errorf("row %d: %q %q, want %q %q", i, r.label, r.names, w.label, w.names)
			continue
		}
		units, effects := r.pairs[w.names[1]], r.pairs[w.names[2]]
		switch w.names[0] {
		case "deliveries":
		case "records":
			units, effects = r.pairs["payments"], r.pairs["charges"]
		default:
			units = r.pairs[w.names[0]]
		}
		if units != n {
			t.Errorf("row %q: %s %d, want %d", r.label, w.names[1], units, n)
		}
		if w.effects >= 0 && effects != w.effects {
			t.Errorf("row %q: %s %d, want %d", r.label, w.names[2], effects, w.effects)
		}
		// The mark says which way the row is wrong, by as much as the
		// effects differ from the units.
		if got := r.double - r.lost; got != effects-units {
			t.Errorf("row %q: marked %q, but %s %d against %d units", r.label, r.mark, w.names[2], effects, units)
		}
		if w.effects >= 0 && w.ok != (r.mark == "ok") {
			t.Errorf("row %q: marked %q, want ok: %v", r.label, r.mark, w.ok)
		}
	}
}

func TestRunOneExperiment(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := Run(t.Context(), Options{Payments: 100, Experiment: 3}, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.HasPrefix(s, "Experiment 3:") || strings.Contains(s, "Experiment 1") || !strings.Contains(s, "claim with lease") {
		t.Errorf("Run with Experiment 3 printed:\n%s", s)
	}
}

// Example_lease shows experiment 3's numbers, which the seed fixes: a claim
// without a lease never lets the redelivery in; with a lease it takes over.
func Example_lease() {
	res, err := runLease(context.Background(), Options{Payments: 100, Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("without lease: %d crashed, %d charges, %d dead-lettered\n",
		res.WithoutLease.Crashed, res.WithoutLease.Charges, res.WithoutLease.DeadLettered)
	fmt.Printf("with lease:    %d crashed, %d charges, %d takeovers\n",
		res.WithLease.Crashed, res.WithLease.Charges, res.WithLease.Takeovers)
	// Output:
	// without lease: 2 crashed, 98 charges, 2 dead-lettered
	// with lease:    2 crashed, 100 charges, 2 takeovers
}
