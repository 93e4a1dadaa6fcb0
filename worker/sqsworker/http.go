package sqsworker

import (
	"net/http"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// ResponseHeaderTimeout bounds how long HTTPClient waits for an answer to
// start: longer than SQS's longest long poll (20 s), so that no call can hang
// for ever on an endpoint that accepted the request and went silent. Calls
// with a tighter bound (the heartbeat's, by the lease's end) pass it in their
// context.
const ResponseHeaderTimeout = 30 * time.Second

// HTTPClient returns an HTTP client for the AWS SDK that keeps up to conns
// idle connections per host. The SDK's default keeps ten, so a worker with
// more handlers than that closes and re-dials connections all the time (it
// showed as a sixth of the worker's CPU in the benchmark). Pass it with
// config.WithHTTPClient, or set aws.Config.HTTPClient. No answer may take
// longer than ResponseHeaderTimeout to start.
func HTTPClient(conns int) *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = 2 * conns
		t.MaxIdleConnsPerHost = conns
		t.ResponseHeaderTimeout = ResponseHeaderTimeout
	})
}
