package integration

import (
	"strings"
	"testing"

	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/pgtest"
)

// TestSetupReports: `worker setup` says on stderr what it created, what
// already existed and what it changed, keeping stdout to the settings.
func TestSetupReports(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	queue, table := awstest.Name("setuprep"), awstest.Name("claims")
	setup := func(extra ...string) (stdout, stderr string) {
		t.Helper()
		code, stdout, stderr := e.command(nil, append([]string{"setup", "-queue-name", queue, "-claim-table", table}, extra...)...)
		if code != 0 {
			t.Fatalf("setup %v: exit %d\n%s", extra, code, stderr)
		}
		t.Logf("setup %v:\n%s", extra, stderr)
		return stdout, stderr
	}
	expect := func(what, out string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s: %q does not say %q", what, out, w)
			}
		}
	}
	stdout, stderr := setup()
	expect("first run", stderr, "created queue "+queue+"-dlq", "created queue "+queue, "created claim table "+table)
	expect("first run stdout", stdout, "QUEUE_URL=", "CLAIM_TABLE="+table)
	if strings.Contains(stdout, "created") {
		t.Errorf("stdout carries the report: %q", stdout)
	}
	_, stderr = setup()
	expect("same again", stderr, "queue "+queue+" exists, unchanged", "claim table "+table+" exists")
	_, stderr = setup("-visibility-timeout", "1m")
	expect("other values", stderr, "queue "+queue+" exists; changed VisibilityTimeout from 30 to 60")
}

// TestSetupReportsPostgres: `worker setup -postgres` says whether it
// created the claim table or found it, as the DynamoDB path does.
func TestSetupReportsPostgres(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	url := pgtest.URL(t)
	queue, table := awstest.Name("setuppg"), pgtest.Name("claims")
	for _, want := range []string{"created claim table " + table, "claim table " + table + " exists"} {
		code, _, stderr := e.command([]string{"DATABASE_URL=" + url}, "setup", "-postgres", "-queue-name", queue, "-claim-table", table)
		if code != 0 {
			t.Fatalf("setup -postgres: exit %d\n%s", code, stderr)
		}
		if !strings.Contains(stderr, want) {
			t.Errorf("setup -postgres said:\n%s\nwant %q", stderr, want)
		}
	}
}

// TestClaimsMissingTableHintsPostgres: `worker claims` against a DynamoDB
// table that does not exist says that the claims may be in PostgreSQL.
func TestClaimsMissingTableHintsPostgres(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	code, _, stderr := e.command(nil, "claims", "get", "k", "-claim-table", awstest.Name("missing"))
	if code == 0 || !strings.Contains(stderr, "STORE=postgres") {
		t.Errorf("claims get on a missing table: exit %d, stderr %q; want a failure hinting at STORE=postgres", code, stderr)
	}
}
