// Package awsreq counts the AWS requests an SDK client sends, by service and
// operation, so that tests and benchmarks report measured request counts.
package awsreq

import (
	"context"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// Counter counts requests; safe for concurrent use.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int64
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter { return &Counter{counts: make(map[string]int64)} }

// APIOption returns the middleware to append to aws.Config.APIOptions. It sits
// after the retry middleware, so every attempt sent on the wire counts.
func (c *Counter) APIOption() func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("awsreq.Counter",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				c.add(awsmiddleware.GetServiceID(ctx) + "." + awsmiddleware.GetOperationName(ctx))
				return next.HandleFinalize(ctx, in)
			}), middleware.After)
	}
}

// Add counts one request to op ("Service.Operation"), for requests counted
// elsewhere than in the SDK (e.g. by a proxy in front of another process).
func (c *Counter) Add(op string) { c.add(op) }

func (c *Counter) add(op string) {
	c.mu.Lock()
	c.counts[op]++
	c.mu.Unlock()
}

// Count returns the number of requests to op, e.g. "DynamoDB.UpdateItem".
func (c *Counter) Count(op string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[op]
}

// Service returns the number of requests to a service, e.g. "SQS".
func (c *Counter) Service(service string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for op, k := range c.counts {
		if len(op) > len(service) && op[:len(service)] == service && op[len(service)] == '.' {
			n += k
		}
	}
	return n
}

// Snapshot returns a copy of the counts by "Service.Operation".
func (c *Counter) Snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int64, len(c.counts))
	for k, v := range c.counts {
		m[k] = v
	}
	return m
}

// Reset sets every count to zero.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.counts = make(map[string]int64)
	c.mu.Unlock()
}
