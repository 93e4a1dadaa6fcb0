// Command lambda is the quick start as an AWS Lambda function for SQS
// events (provided.al2023, partial batch responses on): each order's
// receipt is sent once, however often SQS delivers the order.
//
//	GOOS=linux GOARCH=arm64 go build -tags lambda.norpc -o bootstrap .
package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/keyexpr"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

func main() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamo.New(dynamo.Config{Client: dynamodb.NewFromConfig(cfg), Table: os.Getenv("CLAIM_TABLE")})
	if err != nil {
		log.Fatal(err)
	}
	dec, err := worker.KeyFromJMESPath(keyexpr.Config{Key: "order_id"}) // {"order_id": "ord_7", ...}
	if err != nil {
		log.Fatal(err)
	}
	// JSON logs, durations as "30s", not nanoseconds.
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}))
	l, err := sqsworker.NewLambda(ctx, sqsworker.LambdaConfig{
		QueueURL: os.Getenv("QUEUE_URL"), // poison to its DLQ at once; retention from the queue's
		SQS:      sqs.NewFromConfig(cfg),
		Protocol: worker.Protocol{
			Store: store, Decoder: dec, Logger: logger,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) (string, error) {
				return sendReceipt(ctx, os.Getenv("MAIL_URL"), m.Key)
			}),
		},
	})
	if err != nil {
		log.Fatal(err) // errors.Is(err, worker.ErrConfig): a bad setting
	}
	lambda.Start(l.Handle) // failed records go back as batch item failures
}

// sendReceipt asks a mail service that honours Idempotency-Key to send the
// order's receipt.
func sendReceipt(ctx context.Context, url, order string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(order))
	if err != nil {
		return "", worker.Permanent("bad MAIL_URL", err)
	}
	req.Header.Set("Idempotency-Key", "receipt-"+order)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", worker.Dependency("mail", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return "", worker.Dependency("mail", fmt.Errorf("mail: %s", resp.Status))
	}
	return "sent", nil
}
