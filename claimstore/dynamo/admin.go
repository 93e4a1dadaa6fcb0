package dynamo

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/claimfirst/claimfirst/claimstore"
)

var _ claimstore.Admin = (*Store)(nil)

// DeleteAPI is the part of *dynamodb.Client that Forget needs besides API.
// Config.Client must implement it for Forget; *dynamodb.Client does.
type DeleteAPI interface {
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// ForceRelease implements claimstore.Admin: a strongly consistent read, then
// one UpdateItem conditioned on the row as read.
func (s *Store) ForceRelease(ctx context.Context, key string) (claimstore.Claim, error) {
	before, err := s.adminRead(ctx, key, "force release", claimstore.Claim.AllowsForceRelease)
	if err != nil {
		return before, err
	}
	err = s.adminUpdate(ctx, "force release", before, "SET #status = :released, #acq = :newacq", nil,
		map[string]types.AttributeValue{
			":released": str(string(claimstore.StatusReleased)),
			":newacq":   str(claimstore.NewAcq()),
		})
	return before, err
}

// ForceComplete implements claimstore.Admin: a strongly consistent read,
// then one UpdateItem conditioned on the row as read.
func (s *Store) ForceComplete(ctx context.Context, p claimstore.ForceCompleteParams) (claimstore.Claim, error) {
	if err := p.Check(s.cfg.KeyPrefix); err != nil {
		return claimstore.Claim{}, err
	}
	before, err := s.adminRead(ctx, p.Key, "force complete", claimstore.Claim.AllowsForceComplete)
	if err != nil {
		return before, err
	}
	err = s.adminUpdate(ctx, "force complete", before, "SET #status = :completed, #result = :result, #ttl = :ttl, #acq = :newacq",
		[]string{"#result", "#ttl"}, map[string]types.AttributeValue{
			":newacq":    str(claimstore.NewAcq()),
			":completed": str(string(claimstore.StatusCompleted)),
			":result":    str(p.Result),
			":ttl":       num(p.Expiry(before).Unix()),
		})
	return before, err
}

// Forget implements claimstore.Admin: a strongly consistent read, then one
// DeleteItem conditioned on the row as read.
func (s *Store) Forget(ctx context.Context, key string) (claimstore.Claim, error) {
	del, ok := s.cfg.Client.(DeleteAPI)
	if !ok {
		return claimstore.Claim{}, fmt.Errorf("forget %q: the DynamoDB client has no DeleteItem", key)
	}
	before, err := s.adminRead(ctx, key, "forget", claimstore.Claim.AllowsForget)
	if err != nil {
		return before, err
	}
	cond, names, values := s.asRead(before, nil, map[string]types.AttributeValue{})
	_, err = del.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: s.table, Key: s.key(key),
		ConditionExpression: cond, ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	})
	return before, s.adminError("forget", key, err)
}

// adminRead reads key's live row and checks that allowed accepts it.
func (s *Store) adminRead(ctx context.Context, key, op string, allowed func(claimstore.Claim) bool) (claimstore.Claim, error) {
	return claimstore.ReadForRepair(ctx, s.Get, key, op, allowed)
}

// asRead returns the condition that the row is still c (status, token and
// acquisition id), with the expression names and values it needs added to
// the update's.
func (s *Store) asRead(c claimstore.Claim, names []string, values map[string]types.AttributeValue) (*string, map[string]string, map[string]types.AttributeValue) {
	values[":seenstatus"] = str(string(c.Status))
	values[":seentoken"] = num(c.Token)
	values[":seenacq"] = str(c.Acq)
	cond := "#status = :seenstatus AND #token = :seentoken AND #acq = :seenacq"
	return aws.String(cond), s.names(append([]string{"#status", "#token", "#acq"}, names...)...), values
}

func (s *Store) adminUpdate(ctx context.Context, op string, before claimstore.Claim, update string, names []string, values map[string]types.AttributeValue) error {
	cond, n, v := s.asRead(before, names, values)
	_, err := s.cfg.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: s.table, Key: s.key(before.Key), UpdateExpression: aws.String(update),
		ConditionExpression: cond, ExpressionAttributeNames: n, ExpressionAttributeValues: v,
	})
	return s.adminError(op, before.Key, err)
}

// adminError sorts an admin write's error: a failed condition means the row
// moved after it was read.
func (s *Store) adminError(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("%s %q: %w", op, key, claimstore.ErrClaimChanged)
	}
	return fmt.Errorf("%s %q: %w", op, key, err)
}
