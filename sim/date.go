package sim

import (
	"context"
	"net/http"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// answer runs call as the SDK's client would run a request: through the
// API options of opts (middleware a caller adds, such as the worker's
// clock check), with an HTTP answer whose Date header is the simulated
// AWS's clock (whole seconds, as AWS sends it), read by the SDK's own
// response-timing middleware. Without API options it just calls call.
func answer[O any](ctx context.Context, opts []func(*sqs.Options), call func() (O, error)) (O, error) {
	var o sqs.Options
	for _, f := range opts {
		f(&o)
	}
	if len(o.APIOptions) == 0 {
		return call()
	}
	var out O
	var callErr error
	stack := middleware.NewStack("SimulatedSQS", smithyhttp.NewStackRequest)
	// The outermost deserializer hands back call's output as the result.
	if err := stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("SimulatedResult",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			res, md, err := next.HandleDeserialize(ctx, in)
			res.Result = out
			return res, md, err
		}), middleware.Before); err != nil {
		return out, err
	}
	if err := awsmiddleware.AddRecordResponseTiming(stack); err != nil {
		return out, err
	}
	for _, f := range o.APIOptions {
		if err := f(stack); err != nil {
			return out, err
		}
	}
	server := middleware.HandlerFunc(func(context.Context, any) (any, middleware.Metadata, error) {
		out, callErr = call()
		h := http.Header{"Date": {time.Now().UTC().Format(http.TimeFormat)}}
		return &smithyhttp.Response{Response: &http.Response{StatusCode: http.StatusOK, Header: h}}, middleware.Metadata{}, nil
	})
	if _, _, err := middleware.DecorateHandler(server, stack).Handle(ctx, struct{}{}); err != nil {
		var zero O
		return zero, err
	}
	return out, callErr
}
