package worker

import (
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// HTTPClient returns an HTTP client for the AWS SDK that keeps up to conns
// idle connections per host. The SDK's default keeps ten, so a worker with
// more handlers than that closes and re-dials connections all the time (it
// showed as a sixth of the worker's CPU in the benchmark). Pass it with
// config.WithHTTPClient, or set aws.Config.HTTPClient.
func HTTPClient(conns int) *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = 2 * conns
		t.MaxIdleConnsPerHost = conns
	})
}
