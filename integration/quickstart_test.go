package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/pgtest"
	"github.com/claimfirst/claimfirst/internal/syncbuf"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// TestQuickStartInFreshModule does what the README's quick start says, as
// a newcomer would outside this repository: a new module in an empty
// directory, the quick start's main.go copied into it, this module
// required (replaced by the checkout, which `go get ...@latest` fetches for
// a user), `go mod tidy`, a build; then `worker setup -export` for the
// queue and table, the program run against the emulator, one payment sent
// twice, one charge at the provider, a duplicate in the program's metrics,
// and a SIGTERM that ends it with status 0.
func TestQuickStartInFreshModule(t *testing.T) {
	t.Parallel()
	cfg := awstest.Config(t) // skips without the emulator, fails under make test
	start := time.Now()
	bin := buildInFreshModule(t, "quickstart")
	built := time.Since(start)
	exports := setupExport(t)

	// `worker provider`: a provider that honours keys and counts charges.
	fake, provSrv := fakeprovider.StartTest(t, fakeprovider.Config{})
	metricsAddr := freeAddr(t)
	p := startExample(t, bin, "QUEUE_URL="+exports["QUEUE_URL"], "CLAIM_TABLE="+exports["CLAIM_TABLE"],
		"PROVIDER_URL="+provSrv.URL, "METRICS_ADDR="+metricsAddr)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + metricsAddr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	p.waitFor(t, "200 from /readyz", 20*time.Second, func() bool { code, _ := get("/readyz"); return code == http.StatusOK })

	sendTwice(t, sqs.NewFromConfig(cfg), exports["QUEUE_URL"], `{"payment_id":"pay_quickstart","amount":1999,"currency":"EUR"}`)
	// Both deliveries are settled when the second is a duplicate (or, keyed
	// wrongly, a second charge).
	duplicate := regexp.MustCompile(`(?m)^claimfirst_messages_total\{outcome="duplicate"\} (\d+)$`)
	p.waitFor(t, fmt.Sprintf("duplicate in /metrics (provider %+v)", fake.Stats()), 30*time.Second, func() bool {
		_, m := get("/metrics")
		n := duplicate.FindStringSubmatch(m)
		return n != nil && n[1] != "0" || fake.Stats().Charges > 1
	})
	if st := fake.Stats(); st.Charges != 1 || st.ChargesByPayment["pay_quickstart"] != 1 {
		t.Errorf("provider: %d charges (%v), want 1 for pay_quickstart", st.Charges, st.ChargesByPayment)
	}
	stopped := p.term(t)
	t.Logf("fresh module tidied and built in %s; SIGTERM to exit %s; %s in all",
		built.Round(100*time.Millisecond), stopped.Round(time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}

// TestQuickStartPostgresInFreshModule: the README's PostgreSQL main, built
// the same way, run on a database of its own: one ledger entry sent twice
// is one row, inserted in its claim's transaction, and the program exits 0
// on SIGTERM.
func TestQuickStartPostgresInFreshModule(t *testing.T) {
	t.Parallel()
	awstest.Config(t)
	admin := pgtest.Pool(t)
	db := strings.ReplaceAll(awstest.Name("quickstart"), "-", "_")
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	start := time.Now()
	bin := buildInFreshModule(t, "postgres")
	exports := setupExport(t)
	p := startExample(t, bin, "QUEUE_URL="+exports["QUEUE_URL"], "DATABASE_URL="+u.String())
	p.waitFor(t, "worker started", 20*time.Second, func() bool { return strings.Contains(p.log.String(), "worker started") })

	cfg := awstest.Config(t)
	sendTwice(t, sqs.NewFromConfig(cfg), exports["QUEUE_URL"], `{"entry_id":"e_quickstart","amount":5}`)
	p.waitFor(t, "a duplicate", 30*time.Second, func() bool { return strings.Contains(p.log.String(), "outcome=duplicate") })
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows int
	var status string
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM entries").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT status FROM claims WHERE key = 'e_quickstart'").Scan(&status); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || status != "COMPLETED" {
		t.Errorf("entries: %d rows, claim %s; want 1 row and a COMPLETED claim", rows, status)
	}
	stopped := p.term(t)
	t.Logf("built, ran, one row for two deliveries; SIGTERM to exit %s; %s in all", stopped.Round(time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}

// buildInFreshModule copies examples/<name>/main.go into a new module in a
// temporary directory, requires this module from the checkout, tidies and
// builds it, and returns the binary.
func buildInFreshModule(t *testing.T, name string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the quick start needs the go command: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	main, err := os.ReadFile(filepath.Join(root, "examples", name, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), main, 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		// Outside any workspace, as a fresh module is; -mod=mod lets the
		// go command write go.mod and go.sum as a user's would.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	const module = "github.com/claimfirst/claimfirst"
	goCmd("mod", "init", "example.com/"+name)
	// What `go get github.com/claimfirst/claimfirst@latest` does for a user,
	// from this checkout: a require line, its module from disk.
	goCmd("mod", "edit", "-replace", module+"="+root, "-require", module+"@v0.0.0-00010101000000-000000000000")
	goCmd("mod", "tidy")
	bin := filepath.Join(dir, name)
	goCmd("build", "-race", "-o", bin, ".")
	return bin
}

// setupExport runs `worker setup -export` with names of the test's own and
// returns what it exported.
func setupExport(t *testing.T) map[string]string {
	t.Helper()
	name, table := awstest.Name("quickstart"), awstest.Name("claims")
	cmd := exec.Command(workerBin, "setup", "-export", "-queue-name", name, "-claim-table", table)
	cmd.Env = withoutBrokers(os.Environ()) // the SQS queue, as the quick start's reader sets up
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("worker setup: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("worker setup: %v", err)
	}
	exports := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^export (\w+)='?([^'\n]*)'?$`).FindAllStringSubmatch(string(out), -1) {
		exports[m[1]] = m[2]
	}
	if exports["QUEUE_URL"] == "" || exports["CLAIM_TABLE"] != table {
		t.Fatalf("worker setup -export printed %q: no QUEUE_URL or CLAIM_TABLE", out)
	}
	return exports
}

// sendTwice sends body twice, as a producer's retry does: the same
// payload, a new message.
func sendTwice(t *testing.T, sq *sqs.Client, queueURL, body string) {
	t.Helper()
	for range 2 {
		if _, err := sq.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(queueURL), MessageBody: aws.String(body),
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// example is an example program running as its own process.
type example struct {
	cmd    *exec.Cmd
	log    *syncbuf.Buffer
	exited chan error
	done   bool // exited was received from: the process is gone
}

func startExample(t *testing.T, bin string, env ...string) *example {
	t.Helper()
	p := &example{cmd: exec.Command(bin), log: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	p.cmd.Env = append(withoutBrokers(os.Environ()), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if !p.done {
			_ = p.cmd.Process.Kill()
			t.Logf("the program, killed at the end: %v", <-p.exited)
		}
	})
	return p
}

// waitFor polls ok until it holds, failing the test at timeout or if the
// program exits meanwhile.
func (p *example) waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !ok(); time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-p.exited:
			p.done = true
			t.Fatalf("the program exited (%v) while waiting for %s; its log:\n%s", err, what, tail(p.log.String(), 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s; the program's log:\n%s", what, timeout, tail(p.log.String(), 40))
		}
	}
}

// term sends SIGTERM and expects exit status 0 and no error logged; it
// returns how long the exit took.
func (p *example) term(t *testing.T) time.Duration {
	t.Helper()
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.done = true
		if err != nil {
			t.Errorf("after SIGTERM: %v; want exit status 0; log:\n%s", err, tail(p.log.String(), 20))
		}
	case <-time.After(35 * time.Second):
		t.Fatalf("still running 35s after SIGTERM; log:\n%s", tail(p.log.String(), 20))
	}
	if strings.Contains(p.log.String(), " ERROR ") {
		t.Errorf("the program logged an error:\n%s", tail(p.log.String(), 20))
	}
	return time.Since(sent)
}

// freeAddr returns a free 127.0.0.1 address for a child process to listen on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
