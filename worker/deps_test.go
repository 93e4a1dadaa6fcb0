package worker_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPortableDeps: the protocol imports no broker's client. A program
// that uses only another transport (Kafka, RabbitMQ) must not link the
// SQS transport, the AWS SDK's SQS client or the Lambda runtime; those
// live in package sqsworker, which imports worker, never the reverse.
func TestPortableDeps(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the package's dependencies")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	for _, d := range deps {
		for _, banned := range []string{
			"github.com/aws/aws-sdk-go-v2/service/sqs",
			"github.com/aws/aws-lambda-go",
			"github.com/claimfirst/claimfirst/worker/",
		} {
			if d == banned || strings.HasPrefix(d, strings.TrimSuffix(banned, "/")+"/") {
				t.Errorf("package worker depends on %s", d)
			}
		}
	}
}
