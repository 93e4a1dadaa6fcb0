package kafkaworker_test

import (
	"context"
	"log"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/keyexpr"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/kafkaworker"
)

// A consumer-group member on a Kafka topic: the handler and decoder are the
// ones an SQS worker runs; the key is the payment's id, not the record's
// offset, so that a producer's retry is a duplicate too.
func Example() {
	var store claimstore.Store // dynamo.New or postgres.New, shared by the group
	h := worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
		return "charged:" + m.Key, nil
	})
	if err := run(context.Background(), store, h); err != nil {
		log.Print(err)
	}
}

func run(ctx context.Context, store claimstore.Store, h worker.Handler) error {
	dec, err := worker.KeyFromJMESPath(keyexpr.Config{Key: "payment_id"})
	if err != nil {
		return err
	}
	w, err := kafkaworker.New(ctx, kafkaworker.Config{
		Protocol: worker.Protocol{Store: store, Handler: h, Decoder: dec},
		Brokers:  []string{"127.0.0.1:9092"}, Topic: "payments", Group: "payments-worker",
	})
	if err != nil {
		return err // claims kept shorter than the topic keeps records: ErrRetention
	}
	return w.Run(ctx) // returns once ctx ends and the settled offsets are committed
}
