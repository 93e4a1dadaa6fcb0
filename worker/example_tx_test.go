package worker_test

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/worker"
)

// A handler whose effect is a DynamoDB write commits it with the claim's
// completion: the DynamoDB claim store applies it in the same transaction,
// only while this delivery holds the claim, and exactly once.
func ExampleMessage_Commit() {
	h := worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
		m.Commit(worker.Tx{
			Writes: dynamo.Writes{{Put: &types.Put{
				TableName: aws.String("orders"),
				Item: map[string]types.AttributeValue{
					"pk":     &types.AttributeValueMemberS{Value: "order#" + m.Key},
					"status": &types.AttributeValueMemberS{Value: "shipped"},
				},
				ConditionExpression: aws.String("attribute_not_exists(pk)"),
			}}},
			// The write's own condition failed (the order exists): nothing
			// was written; complete the claim with that outcome.
			Rejected: func(e *claimstore.WriteConditionError) (string, error) {
				return fmt.Sprintf("write %d refused: order exists", e.Index), nil
			},
		})
		return "shipped", nil
	})
	_ = worker.Protocol{Handler: h} // with Store: a *dynamo.Store; embedded in each transport's configuration (sqsworker.Config, ...)
}
