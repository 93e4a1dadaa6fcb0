package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestNatural(t *testing.T) {
	t.Parallel()
	res, err := runNatural(t.Context(), Options{Payments: testPayments, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	twice := testPayments / 20
	for _, r := range []naturalRow{res.Increment, res.Set, res.Conditional} {
		if r.Deliveries != testPayments+twice || r.Orders != testPayments {
			t.Fatalf("deliveries %d, orders %d; want %d, %d", r.Deliveries, r.Orders, testPayments+twice, testPayments)
		}
	}
	inc, set, cond := res.Increment, res.Set, res.Conditional
	if inc.Shipped != testPayments+twice || inc.Double != twice || inc.Lost != 0 {
		t.Errorf("increment: shipped %d, %+v; want %d, double %d", inc.Shipped, inc.effects, testPayments+twice, twice)
	}
	if set.Shipped != testPayments || !set.OK() || set.Writes != testPayments+twice {
		t.Errorf("set: shipped %d, %+v, writes %d; want %d, ok, a write per delivery %d",
			set.Shipped, set.effects, set.Writes, testPayments, testPayments+twice)
	}
	if cond.Shipped != testPayments || !cond.OK() || cond.Writes != testPayments || cond.Rejected != twice {
		t.Errorf("conditional: shipped %d, %+v, writes %d, rejected %d; want %d, ok, %d, %d",
			cond.Shipped, cond.effects, cond.Writes, cond.Rejected, testPayments, testPayments, twice)
	}
}

func TestRemember(t *testing.T) {
	t.Parallel()
	res, err := runRemember(t.Context(), Options{Payments: testPayments, Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	late := testPayments / 20
	short, long := res.Short, res.PastRetention
	for _, r := range []rememberRow{short, long} {
		if r.Payments != testPayments || r.Late != late {
			t.Fatalf("payments %d, late duplicates %d; want %d, %d", r.Payments, r.Late, testPayments, late)
		}
	}
	if short.Charges != testPayments+late || short.Double != late || short.Lost != 0 || short.Duplicates != 0 {
		t.Errorf("claims kept 1 hour: charges %d, %+v, duplicates %d; want %d, double %d, none recognized",
			short.Charges, short.effects, short.Duplicates, testPayments+late, late)
	}
	if long.Charges != testPayments || !long.OK() || long.Duplicates != late {
		t.Errorf("claims kept past retention: charges %d, %+v, duplicates %d; want %d, ok, %d",
			long.Charges, long.effects, long.Duplicates, testPayments, late)
	}
}

func TestLedger(t *testing.T) {
	t.Parallel()
	crashed := testPayments / 50
	var balanceErrors []int64
	for _, seed := range []int64{1, 2} {
		res, err := runLedger(t.Context(), Options{Payments: testPayments, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		two, tx := res.WriteThenComplete, res.OneTransaction
		for _, r := range []ledgerRow{two, tx} {
			if r.Payments != testPayments || r.Crashed != crashed {
				t.Fatalf("payments %d, crashed %d; want %d, %d", r.Payments, r.Crashed, testPayments, crashed)
			}
		}
		if two.Entries != testPayments+crashed || two.Double != crashed || two.Lost != 0 ||
			two.Takeovers != crashed || two.BalanceError <= 0 {
			t.Errorf("write, then complete: entries %d, %+v, takeovers %d, balance error %d; want %d, double %d, %d, above 0",
				two.Entries, two.effects, two.Takeovers, two.BalanceError, testPayments+crashed, crashed, crashed)
		}
		if tx.Entries != testPayments || !tx.OK() || tx.BalanceError != 0 || tx.Takeovers != 0 || tx.Duplicates != crashed {
			t.Errorf("one transaction: entries %d, %+v, balance error %d, takeovers %d, duplicates %d; want %d, ok, 0, 0, %d",
				tx.Entries, tx.effects, tx.BalanceError, tx.Takeovers, tx.Duplicates, testPayments, crashed)
		}
		balanceErrors = append(balanceErrors, two.BalanceError)
	}
	// The seed chooses the entries that are written twice, and so by how
	// much the balances are off.
	if balanceErrors[0] == balanceErrors[1] {
		t.Errorf("seeds 1 and 2 put the balances off by the same %d: the seed does not choose", balanceErrors[0])
	}
}

func TestForget(t *testing.T) {
	t.Parallel()
	res, err := runForget(t.Context(), Options{Payments: testPayments, Seed: 8})
	if err != nil {
		t.Fatal(err)
	}
	late := testPayments / 50
	blind, look := res.RetryWithKey, res.LookUp
	for _, r := range []forgetRow{blind, look} {
		if r.Payments != testPayments || r.Late != late {
			t.Fatalf("payments %d, late retries %d; want %d, %d", r.Payments, r.Late, testPayments, late)
		}
	}
	if blind.Charges != testPayments+late || blind.Double != late || blind.Lost != 0 || blind.Forgotten != late || blind.Lookups != 0 {
		t.Errorf("retry with the forgotten key: charges %d, %+v, forgotten %d, lookups %d; want %d, double %d, %d, 0",
			blind.Charges, blind.effects, blind.Forgotten, blind.Lookups, testPayments+late, late, late)
	}
	if look.Charges != testPayments || !look.OK() || look.Forgotten != 0 || look.Lookups != late {
		t.Errorf("look up before charging: charges %d, %+v, forgotten %d, lookups %d; want %d, ok, 0, %d",
			look.Charges, look.effects, look.Forgotten, look.Lookups, testPayments, late)
	}
}

// TestLateExperimentsRepeat runs experiments 5 to 8 three times at the
// demo's default size and seed: the same numbers every time, those of the
// design's tables.
func TestLateExperimentsRepeat(t *testing.T) {
	t.Parallel()
	opts := Options{Seed: 1} // `worker demo`'s default seed; 2000 payments
	type results struct {
		natural  naturalResult
		remember rememberResult
		ledger   ledgerResult
		forget   forgetResult
	}
	var runs []results
	for range 3 {
		var r results
		var err error
		if r.natural, err = runNatural(t.Context(), opts); err != nil {
			t.Fatal(err)
		}
		if r.remember, err = runRemember(t.Context(), opts); err != nil {
			t.Fatal(err)
		}
		if r.ledger, err = runLedger(t.Context(), opts); err != nil {
			t.Fatal(err)
		}
		if r.forget, err = runForget(t.Context(), opts); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	for i, r := range runs[1:] {
		if r != runs[0] {
			t.Errorf("run %d differs from run 1:\n%+v\n%+v", i+2, r, runs[0])
		}
	}
	r := runs[0]
	for _, c := range []struct {
		name          string
		units, effect int
		want          int
	}{
		{"increment: shipped", r.natural.Increment.Orders, r.natural.Increment.Shipped, 2100},
		{"set: shipped", r.natural.Set.Orders, r.natural.Set.Shipped, 2000},
		{"conditional: shipped", r.natural.Conditional.Orders, r.natural.Conditional.Shipped, 2000},
		{"kept 1 hour: charges", r.remember.Short.Payments, r.remember.Short.Charges, 2100},
		{"kept past retention: charges", r.remember.PastRetention.Payments, r.remember.PastRetention.Charges, 2000},
		{"write, then complete: entries", r.ledger.WriteThenComplete.Payments, r.ledger.WriteThenComplete.Entries, 2040},
		{"one transaction: entries", r.ledger.OneTransaction.Payments, r.ledger.OneTransaction.Entries, 2000},
		{"forgotten key: charges", r.forget.RetryWithKey.Payments, r.forget.RetryWithKey.Charges, 2040},
		{"look up: charges", r.forget.LookUp.Payments, r.forget.LookUp.Charges, 2000},
	} {
		if c.units != 2000 || c.effect != c.want {
			t.Errorf("%s %d for %d units, want %d for 2000", c.name, c.effect, c.units, c.want)
		}
	}
}

// TestProgressNeverInsideATable runs two experiments with a progress line
// every millisecond into the same buffer as the tables: every progress line
// stands between one experiment's output and the next heading, never inside
// a heading, table or summary.
func TestProgressNeverInsideATable(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	for _, e := range []int{5, 7} {
		opts := WithProgressEvery(Options{Payments: 1000, Experiment: e}, time.Millisecond)
		opts.Progress = &out
		if err := Run(t.Context(), opts, &out); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	progressLines := 0
	for i, line := range lines {
		if !strings.HasPrefix(line, "demo: ") {
			continue
		}
		progressLines++
		j := i + 1
		for j < len(lines) && strings.HasPrefix(lines[j], "demo: ") {
			j++
		}
		if j < len(lines)-1 && lines[j] == "" { // the blank line between experiments
			j++
		}
		switch {
		case j == len(lines):
		case strings.HasPrefix(lines[j], "Experiment "):
		default:
			t.Errorf("progress line %d (%q) is followed by %q, not by a heading", i+1, line, lines[j])
		}
	}
	if progressLines == 0 {
		t.Errorf("no progress line at all in:\n%s", out.String())
	}
}
