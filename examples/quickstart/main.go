// Command quickstart charges each payment on an SQS queue once, however
// often SQS delivers it: the README's quick start.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

func main() {
	// SIGTERM (docker stop, Kubernetes) or Ctrl-C ends ctx, and so Run.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		log.Fatal(err) // errors.Is(err, worker.ErrConfig): a bad setting
	}
}

func run(ctx context.Context) error {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(sqsworker.HTTPClient(64)))
	if err != nil {
		return err
	}
	store, err := dynamo.New(dynamo.Config{Client: dynamodb.NewFromConfig(cfg), Table: os.Getenv("CLAIM_TABLE")})
	if err != nil {
		return err
	}
	w, err := sqsworker.New(ctx, sqsworker.Config{
		QueueURL: os.Getenv("QUEUE_URL"),
		SQS:      sqs.NewFromConfig(cfg),
		Protocol: worker.Protocol{
			Store:   store,
			Decoder: worker.DecoderFunc(decodePayment),
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) (string, error) {
				// m.Key is this worker's alone until the handler returns.
				return charge(ctx, os.Getenv("PROVIDER_URL"), m.Key, m.Payload.(payment))
			}),
		},
	})
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: cmp.Or(os.Getenv("METRICS_ADDR"), "127.0.0.1:9090"),
		Handler: w.HTTPHandler(nil), ReadHeaderTimeout: 5 * time.Second} // /metrics, /healthz, /readyz
	go func() { log.Print(srv.ListenAndServe()) }()
	defer srv.Close()
	return w.Run(ctx) // returns when ctx ends (SIGTERM) and the handlers in flight finish, within ShutdownTimeout
}

type payment struct {
	ID       string `json:"payment_id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// decodePayment keys a message by its payment id (a producer's retry is a
// new message, the same payment). An error dead-letters the message at once.
func decodePayment(m *worker.Message) error {
	var p payment
	if err := json.Unmarshal([]byte(m.Body), &p); err != nil || p.ID == "" || p.Amount <= 0 {
		return fmt.Errorf("not a payment: %q", m.Body)
	}
	m.Key, m.Payload = p.ID, p
	m.Fingerprint = fmt.Sprintf("%d %s", p.Amount, p.Currency) // another payment under a used key: dead-lettered
	return nil
}

// charge forwards the key, so that a retried charge whose answer was lost
// is not charged twice by the provider either.
func charge(ctx context.Context, url, key string, p payment) (string, error) {
	body, _ := json.Marshal(p)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return "", worker.Permanent("bad provider URL", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", worker.Dependency("provider", err) // retried, same key
	}
	defer resp.Body.Close()
	var out struct{ ID, Status string }
	switch {
	case resp.StatusCode < 300 && json.NewDecoder(resp.Body).Decode(&out) == nil:
		return out.ID, nil // stored with the completed claim
	case resp.StatusCode == http.StatusPaymentRequired:
		return "declined", nil // an outcome: complete the claim with it
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusTooManyRequests:
		return "", worker.Dependency("provider", fmt.Errorf("provider: %s", resp.Status))
	default:
		return "", worker.Permanent("provider refused", fmt.Errorf("provider: %s", resp.Status))
	}
}
