package main

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/claimfirst/claimfirst/redrive"
	"github.com/claimfirst/claimfirst/worker/rabbitworker"
)

// TestRabbitReason: a dead letter's reason is the worker's header, else
// the broker's latest death (x-death lists them latest first): a message
// that went through the delay queue died there first, expired, and then
// at the delivery limit.
func TestRabbitReason(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		headers amqp.Table
		want    string
	}{
		{"the worker's", amqp.Table{rabbitworker.ReasonHeader: "poison: not JSON", "x-first-death-reason": "expired"}, "poison: not JSON"},
		{"the broker's latest", amqp.Table{
			"x-first-death-reason": "expired",
			"x-death": []any{
				amqp.Table{"reason": "delivery_limit", "queue": "payments"},
				amqp.Table{"reason": "expired", "queue": "payments.delay"},
			},
		}, "delivery_limit"},
		{"the broker's first, without x-death", amqp.Table{"x-first-death-reason": "delivery_limit"}, "delivery_limit"},
		{"none", nil, redrive.NoReason},
	} {
		if got := rabbitReason(amqp.Delivery{Headers: c.headers}); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestRedriveDropsTheDelayHeaders: a moved message starts afresh, without
// the attempts and the due time a retry through the delay queue carried.
func TestRedriveDropsTheDelayHeaders(t *testing.T) {
	t.Parallel()
	for _, k := range []string{rabbitworker.AttemptsHeader, rabbitworker.NotBeforeHeader} {
		if !deathHeader(k) {
			t.Errorf("redrive keeps %s", k)
		}
	}
}
