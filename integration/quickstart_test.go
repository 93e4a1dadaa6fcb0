package integration

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
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

	"github.com/claimfirst/claimfirst/internal/awstest"
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
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the quick start needs the go command: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	main, err := os.ReadFile(filepath.Join(root, "examples", "quickstart", "main.go"))
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
	goCmd("mod", "init", "example.com/payments")
	// What `go get github.com/claimfirst/claimfirst@latest` does for a user,
	// from this checkout: a require line, its module from disk.
	goCmd("mod", "edit", "-replace", module+"="+root, "-require", module+"@v0.0.0-00010101000000-000000000000")
	goCmd("mod", "tidy")
	bin := filepath.Join(dir, "payments")
	goCmd("build", "-race", "-o", bin, ".")
	built := time.Since(start)

	// `eval "$(worker setup -export)"`, with names of this test's own.
	name, table := awstest.Name("quickstart"), awstest.Name("claims")
	out, err := exec.Command(workerBin, "setup", "-export", "-queue-name", name, "-claim-table", table).Output()
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

	// `worker provider`: a provider that honours keys and counts charges.
	fake, provSrv := fakeprovider.StartTest(t, fakeprovider.Config{})
	metricsAddr := freeAddr(t)
	var log syncbuf.Buffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "QUEUE_URL="+exports["QUEUE_URL"], "CLAIM_TABLE="+table,
		"PROVIDER_URL="+provSrv.URL, "METRICS_ADDR="+metricsAddr)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			t.Logf("the program, killed at the end: %v", <-exited)
		}
	})

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + metricsAddr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(what string, timeout time.Duration, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(timeout); !ok(); time.Sleep(100 * time.Millisecond) {
			select {
			case err := <-exited:
				t.Fatalf("the program exited (%v) while waiting for %s; its log:\n%s", err, what, tail(log.String(), 40))
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s within %s; provider %+v; the program's log:\n%s", what, timeout, fake.Stats(), tail(log.String(), 40))
			}
		}
	}
	waitFor("200 from /readyz", 20*time.Second, func() bool { code, _ := get("/readyz"); return code == http.StatusOK })

	sq := sqs.NewFromConfig(cfg)
	body := `{"payment_id":"pay_quickstart","amount":1999,"currency":"EUR"}`
	for range 2 { // a producer's retry: the same payment, a new message
		if _, err := sq.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(exports["QUEUE_URL"]), MessageBody: aws.String(body),
		}); err != nil {
			t.Fatal(err)
		}
	}
	duplicate := regexp.MustCompile(`(?m)^claimfirst_messages_total\{outcome="duplicate"\} (\d+)$`)
	// Both deliveries are settled when the second is a duplicate (or, keyed
	// wrongly, a second charge).
	waitFor("duplicate in /metrics", 30*time.Second, func() bool {
		_, m := get("/metrics")
		n := duplicate.FindStringSubmatch(m)
		return n != nil && n[1] != "0" || fake.Stats().Charges > 1
	})
	if st := fake.Stats(); st.Charges != 1 || st.ChargesByPayment["pay_quickstart"] != 1 {
		t.Errorf("provider: %d charges (%v), want 1 for pay_quickstart", st.Charges, st.ChargesByPayment)
	}

	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("after SIGTERM: %v; want exit status 0; log:\n%s", err, tail(log.String(), 20))
		}
	case <-time.After(35 * time.Second):
		t.Fatalf("still running 35s after SIGTERM; log:\n%s", tail(log.String(), 20))
	}
	t.Logf("fresh module tidied and built in %s; setup, two sends, one charge, SIGTERM to exit %s; %s in all",
		built.Round(100*time.Millisecond), time.Since(sent).Round(time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	if strings.Contains(log.String(), " ERROR ") {
		t.Errorf("the program logged an error:\n%s", tail(log.String(), 20))
	}
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
