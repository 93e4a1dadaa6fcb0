package awstest

import (
	"net/http"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/claimfirst/claimfirst/internal/faultproxy"
)

// ItemLimitBytes is DynamoDB's item size limit, 400 KB.
const ItemLimitBytes = 400 * 1024

// WithItemLimit returns Config pointed at a faultproxy in front of the
// emulator that refuses, as DynamoDB does and the emulator does not, a
// PutItem or UpdateItem whose request is larger than DynamoDB's item
// limit: 400 ValidationException "Item size has exceeded the maximum
// allowed size". The request counts a little more than the item (its JSON
// and the other parameters), so this errs on the side of refusing.
// It returns the rule, whose Injected counts the refusals.
func WithItemLimit(tb testing.TB) (aws.Config, *faultproxy.Rule) {
	tb.Helper()
	cfg := Config(tb)
	p, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL"), 1)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	r := p.Add(&faultproxy.Rule{
		Name: "DynamoDB's item size limit",
		Match: faultproxy.All(faultproxy.Target("PutItem", "UpdateItem"), func(r faultproxy.Request) bool {
			return len(r.Body) > ItemLimitBytes
		}),
		Fault: faultproxy.AWSError(http.StatusBadRequest, "ValidationException", "Item size has exceeded the maximum allowed size"),
	})
	cfg.BaseEndpoint = aws.String(p.URL)
	return cfg, r
}
