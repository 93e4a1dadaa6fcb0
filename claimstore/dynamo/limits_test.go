package dynamo_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/faultproxy"
)

// TestCompleteValidationIsNotAnOutage: DynamoDB refusing a completion as
// invalid (its ValidationException, as for an item over 400 KB) is
// claimstore.ErrResultTooLarge, which no retry changes, not an error of
// unknown outcome that a caller retries as an outage.
func TestCompleteValidationIsNotAnOutage(t *testing.T) {
	t.Parallel()
	direct := client(t, nil)
	p, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL"), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	cfg := awstest.Config(t)
	cfg.BaseEndpoint = aws.String(p.URL)
	s := newStore(t, dynamodb.NewFromConfig(cfg), time.Now)
	ctx := context.Background()
	key := awstest.Name("invalid")
	now := time.Now()
	a, err := s.Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: "w", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	p.Add(&faultproxy.Rule{Name: "item too large", Match: faultproxy.Target("UpdateItem"), Limit: 1,
		Fault: faultproxy.AWSError(http.StatusBadRequest, "ValidationException", "Item size to update has exceeded the maximum allowed size")})
	err = s.Complete(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "r", ExpiresAt: now.Add(time.Hour)})
	if !errors.Is(err, claimstore.ErrResultTooLarge) {
		t.Fatalf("Complete refused with a ValidationException: err = %v, want ErrResultTooLarge", err)
	}
	if c, err := newStore(t, direct, time.Now).Get(ctx, key); err != nil || c.Status != claimstore.StatusInProgress {
		t.Fatalf("claim after the refusal = %s, %v; want still IN_PROGRESS", c.Status, err)
	}
}
