package demo

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	ledgerpkg "github.com/claimfirst/claimfirst/ledger"
)

// TestCommitLeaseLostDynamoDB is TestCommitLeaseLost with the ledger and the
// claims in DynamoDB: the claim's condition cancels the whole transaction.
func TestCommitLeaseLostDynamoDB(t *testing.T) {
	t.Parallel()
	client := dynamodb.NewFromConfig(awstest.Config(t))
	claims, entries := awstest.Name("demo-claims"), awstest.Name("demo-ledger")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := dynamo.CreateTable(ctx, client, dynamo.TableSpec{Name: claims}); err != nil {
		t.Fatal(err)
	}
	if err := ledgerpkg.CreateTable(ctx, client, entries); err != nil {
		t.Fatal(err)
	}
	c := &clock{}
	store, err := dynamo.New(dynamo.Config{Client: client, Table: claims, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	testCommitLeaseLost(t, c, store, &dynamoLedger{api: client, table: entries, ns: "t/"})
}
