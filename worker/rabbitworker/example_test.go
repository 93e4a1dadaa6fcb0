package rabbitworker_test

import (
	"context"
	"log"
	"time"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/rabbitworker"
)

// A worker on a RabbitMQ queue: Setup declares the quorum queue, its
// dead-letter exchange and queue; the handler and decoder are the ones an
// SQS worker runs.
func Example() {
	if err := run(context.Background(), "amqp://guest:guest@127.0.0.1:5672/"); err != nil {
		log.Print(err)
	}
}

func run(ctx context.Context, url string) error {
	store := memory.New(memory.Config{})
	dec := worker.KeyFromMessageID
	h := worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
		return "done:" + m.Key, nil
	})
	err := rabbitworker.Setup(ctx, url, rabbitworker.Topology{Queue: "payments"})
	if err != nil {
		return err
	}
	w, err := rabbitworker.New(ctx, rabbitworker.Config{
		Protocol: worker.Protocol{Store: store, Handler: h, Decoder: dec, Retention: 14 * 24 * time.Hour},
		URL:      url, Queue: "payments",
	})
	if err != nil {
		return err
	}
	err = w.Run(ctx) // w.Health() for /readyz
	return err
}
