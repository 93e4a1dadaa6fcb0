package dynamo

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/claimfirst/claimfirst/claimstore"
)

var _ claimstore.TxCompleter = (*Store)(nil)

// Transaction limits of TransactWriteItems.
const (
	// MaxTxItems is the most items one transaction may touch, the claim's
	// completion included: a caller may add MaxTxItems-1 writes.
	MaxTxItems = 100
	// MaxTxBytes is the most data one transaction may carry.
	MaxTxBytes = 4 << 20
)

// TxAPI is the part of *dynamodb.Client that CompleteTx uses besides API.
type TxAPI interface {
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Writes are a caller's own DynamoDB writes (each one Put, Update, Delete or
// ConditionCheck, on any table, the claim table included but not the claim's
// own row) for CompleteTx to commit with the claim's completion.
type Writes []types.TransactWriteItem

// Len implements claimstore.TxWrites.
func (w Writes) Len() int { return len(w) }

// CompleteTx implements claimstore.TxCompleter: one TransactWriteItems whose
// first item is the completion, conditioned as Complete is, followed by w.
// Either the claim is completed and every write applied, or nothing is.
//
// Cost: DynamoDB charges a transactional write two write units per item
// (per KB), so a completion with n writes costs 2(n+1) units where a plain
// Complete and n separate writes cost n+1. It is still one request.
//
// A cancelled transaction is told apart by its cancellation reasons: the
// claim's condition failing is claimstore.ErrLeaseLost (unless the row shows
// the caller's acquisition completed: its own earlier try, applied, which
// is success); a write's own condition failing is a
// *claimstore.WriteConditionError with that write's index in w; a write
// DynamoDB rejects as invalid is claimstore.ErrInvalidParams; throttling and
// conflicts with other transactions are returned wrapped, retryable. More
// than MaxTxItems-1 writes or MaxTxBytes of data is claimstore.ErrTxTooLarge,
// and a Client without TransactWriteItems is claimstore.ErrTxUnsupported,
// both before anything is sent.
func (s *Store) CompleteTx(ctx context.Context, p claimstore.CompleteParams, tw claimstore.TxWrites) error {
	if err := p.Check(s.cfg.KeyPrefix); err != nil {
		return err
	}
	w, ok := tw.(Writes)
	if !ok {
		return fmt.Errorf("%w: complete %q: writes are %T, want dynamo.Writes", claimstore.ErrInvalidParams, p.Key, tw)
	}
	if len(w) == 0 {
		return s.Complete(ctx, p)
	}
	api, ok := s.cfg.Client.(TxAPI)
	if !ok {
		return fmt.Errorf("complete %q: the DynamoDB client %T has no TransactWriteItems: %w", p.Key, s.cfg.Client, claimstore.ErrTxUnsupported)
	}
	if err := s.checkWrites(p.Key, w); err != nil {
		return err
	}
	cw := s.complete
	values := map[string]types.AttributeValue{
		":completed":  str(string(claimstore.StatusCompleted)),
		":result":     str(p.Result),
		":ttl":        num(claimstore.ExpirySeconds(p.ExpiresAt)),
		":acq":        str(p.Acq),
		":inprogress": str(string(claimstore.StatusInProgress)),
	}
	items := make([]types.TransactWriteItem, 0, len(w)+1)
	items = append(items, types.TransactWriteItem{Update: &types.Update{
		TableName:                           s.table,
		Key:                                 s.key(p.Key),
		UpdateExpression:                    cw.update,
		ConditionExpression:                 cw.cond,
		ExpressionAttributeNames:            cw.names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}})
	items = append(items, w...)
	_, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		return nil
	}
	return s.txError(p.Holder, len(w), err)
}

// txError sorts a failed transaction's error by its cancellation reasons.
func (s *Store) txError(h claimstore.Holder, writes int, err error) error {
	prefix := fmt.Sprintf("complete %q token %d with %d writes", h.Key, h.Token, writes)
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "ValidationException" {
			return fmt.Errorf("%s: %w: %w", prefix, claimstore.ErrInvalidParams, err)
		}
		return fmt.Errorf("%s: %w", prefix, err)
	}
	reasons := tce.CancellationReasons
	if len(reasons) > 0 && aws.ToString(reasons[0].Code) == "ConditionalCheckFailed" {
		if len(reasons[0].Item) > 0 {
			old, derr := s.decode(h.Key, reasons[0].Item)
			if derr == nil && old.Acq == h.Acq && old.Status == claimstore.StatusCompleted {
				// This acquisition's own transaction, applied on an
				// earlier try whose answer was lost: the writes went with it.
				return nil
			}
		}
		return fmt.Errorf("%s: %w", prefix, claimstore.ErrLeaseLost)
	}
	for i, r := range reasons {
		if i == 0 {
			continue
		}
		switch aws.ToString(r.Code) {
		case "ConditionalCheckFailed":
			return fmt.Errorf("%s: %w", prefix, &claimstore.WriteConditionError{Index: i - 1, Item: item(r.Item), Err: err})
		case "ValidationError", "ItemCollectionSizeLimitExceeded":
			return fmt.Errorf("%s: write %d: %w: %w", prefix, i-1, claimstore.ErrInvalidParams, err)
		}
	}
	// Throttling, a conflict with another transaction, or a claim row
	// DynamoDB could not write: nothing was applied; a retry may succeed.
	return fmt.Errorf("%s: %w", prefix, err)
}

// checkWrites refuses, before sending, what DynamoDB would: too many
// items, too much data, a write that is not exactly one operation, or one
// on the claim's own row (a transaction touches each item once).
func (s *Store) checkWrites(key string, w Writes) error {
	if n := len(w) + 1; n > MaxTxItems {
		return fmt.Errorf("complete %q: %w: %d items with the claim, DynamoDB allows %d", key, claimstore.ErrTxTooLarge, n, MaxTxItems)
	}
	claimKey := claimstore.StoredKey(s.cfg.KeyPrefix, key)
	var errs []error
	size := 0
	for i, it := range w {
		table, k, n, ops := "", map[string]types.AttributeValue(nil), 0, 0
		if op := it.Put; op != nil {
			ops++
			table, k = aws.ToString(op.TableName), op.Item
			n += exprSize(op.ConditionExpression, op.ExpressionAttributeNames, op.ExpressionAttributeValues) + itemSize(op.Item)
		}
		if op := it.Update; op != nil {
			ops++
			table, k = aws.ToString(op.TableName), op.Key
			n += exprSize(op.UpdateExpression, op.ExpressionAttributeNames, op.ExpressionAttributeValues) +
				exprSize(op.ConditionExpression, nil, nil) + itemSize(op.Key)
		}
		if op := it.Delete; op != nil {
			ops++
			table, k = aws.ToString(op.TableName), op.Key
			n += exprSize(op.ConditionExpression, op.ExpressionAttributeNames, op.ExpressionAttributeValues) + itemSize(op.Key)
		}
		if op := it.ConditionCheck; op != nil {
			ops++
			table, k = aws.ToString(op.TableName), op.Key
			n += exprSize(op.ConditionExpression, op.ExpressionAttributeNames, op.ExpressionAttributeValues) + itemSize(op.Key)
		}
		switch {
		case ops != 1:
			errs = append(errs, fmt.Errorf("write %d has %d operations, want exactly one of Put, Update, Delete, ConditionCheck", i, ops))
			continue
		case table == "":
			errs = append(errs, fmt.Errorf("write %d has no TableName", i))
		case table == s.cfg.Table:
			if v, ok := k[s.cfg.KeyAttribute].(*types.AttributeValueMemberS); ok && v.Value == claimKey {
				errs = append(errs, fmt.Errorf("write %d is on the claim's own row", i))
			}
		}
		size += n
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: complete %q: %w", claimstore.ErrInvalidParams, key, errors.Join(errs...))
	}
	if size > MaxTxBytes {
		return fmt.Errorf("complete %q: %w: the writes carry about %d bytes, DynamoDB allows %d", key, claimstore.ErrTxTooLarge, size, MaxTxBytes)
	}
	return nil
}

// exprSize is the size of an expression and its names and values.
func exprSize(expr *string, names map[string]string, values map[string]types.AttributeValue) int {
	n := len(aws.ToString(expr))
	for k, v := range names {
		n += len(k) + len(v)
	}
	return n + itemSize(values)
}

// itemSize is DynamoDB's size of an item: each attribute's name and value.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + valueSize(v)
	}
	return n
}

// valueSize follows DynamoDB's item size rules closely enough to refuse a
// transaction that is over the limit before sending it.
func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return len(v.Value)/2 + 1
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range v.Value {
			n += len(s)/2 + 1
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range v.Value {
			n += len(b)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		return 3 + itemSize(v.Value) + len(v.Value)
	default:
		return 0
	}
}

// item is a cancellation reason's row, nil (untyped) if there is none.
func item(it map[string]types.AttributeValue) any {
	if len(it) == 0 {
		return nil
	}
	return it
}
