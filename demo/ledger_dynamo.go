package demo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
)

// LedgerAPI is the part of *dynamodb.Client that a DynamoDB ledger uses.
type LedgerAPI interface {
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// DynamoDBLedger keeps experiment 7's ledger (as Options.Ledger) in a
// DynamoDB table with a string partition key "pk" (ledger.CreateTable makes
// one), beside its claims in Options.NewStore's stores, which must then be
// DynamoDB stores (DynamoDBStores): the one-transaction row commits the
// entry, the balance and the claim's completion in one TransactWriteItems.
type DynamoDBLedger struct {
	Client LedgerAPI
	Table  string
}

// ledgerDB is experiment 7's database: in memory (ledger) or in DynamoDB
// (dynamoLedger).
type ledgerDB interface {
	// write appends e and moves its balance, with no tie to any claim.
	write(ctx context.Context, e ledgerEntry) error
	// commit completes p's claim and writes e as one step: both or neither.
	commit(ctx context.Context, store claimstore.Store, p claimstore.CompleteParams, e ledgerEntry) error
	// entries counts the journal's entries, per entry id, and the balances.
	entries(ctx context.Context) (n int, byID map[string]int, balances map[string]int64, err error)
}

// dynamoLedger is a ledger in a DynamoDB table: a journal row per entry
// written (a naive append: two writes of one entry are two rows) and a row
// per account whose balance each write moves, all keyed under ns.
type dynamoLedger struct {
	api   LedgerAPI
	table string
	ns    string
	seq   atomic.Int64
}

func (l *dynamoLedger) writes(e ledgerEntry) dynamo.Writes {
	str := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	num := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	row := l.ns + "journal#" + e.EntryID + "#" + strconv.FormatInt(l.seq.Add(1), 10)
	return dynamo.Writes{
		{Put: &types.Put{TableName: aws.String(l.table), Item: map[string]types.AttributeValue{
			"pk": str(row), "entry_id": str(e.EntryID), "account": str(e.Account), "amount": num(e.Amount),
		}}},
		{Update: &types.Update{
			TableName: aws.String(l.table), Key: map[string]types.AttributeValue{"pk": str(l.ns + "account#" + e.Account)},
			UpdateExpression:          aws.String("ADD balance :amount"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":amount": num(e.Amount)},
		}},
	}
}

func (l *dynamoLedger) write(ctx context.Context, e ledgerEntry) error {
	_, err := l.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: l.writes(e)})
	return err
}

func (l *dynamoLedger) commit(ctx context.Context, store claimstore.Store, p claimstore.CompleteParams, e ledgerEntry) error {
	err := claimstore.CompleteTx(ctx, store, p, l.writes(e))
	if errors.Is(err, claimstore.ErrTxUnsupported) {
		return fmt.Errorf("experiment 7 on DynamoDB needs DynamoDB claim stores: %w", err)
	}
	return err
}

func (l *dynamoLedger) entries(ctx context.Context) (int, map[string]int, map[string]int64, error) {
	byID := map[string]int{}
	balances := map[string]int64{}
	n := 0
	in := &dynamodb.ScanInput{
		TableName: aws.String(l.table), ConsistentRead: aws.Bool(true),
		FilterExpression:          aws.String("begins_with(pk, :ns)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":ns": &types.AttributeValueMemberS{Value: l.ns}},
	}
	for {
		out, err := l.api.Scan(ctx, in)
		if err != nil {
			return 0, nil, nil, fmt.Errorf("scan the ledger: %w", err)
		}
		for _, item := range out.Items {
			pk, _ := item["pk"].(*types.AttributeValueMemberS)
			if pk == nil {
				continue
			}
			rest := strings.TrimPrefix(pk.Value, l.ns)
			switch {
			case strings.HasPrefix(rest, "journal#"):
				if id, ok := item["entry_id"].(*types.AttributeValueMemberS); ok {
					byID[id.Value]++
					n++
				}
			case strings.HasPrefix(rest, "account#"):
				if b, ok := item["balance"].(*types.AttributeValueMemberN); ok {
					v, err := strconv.ParseInt(b.Value, 10, 64)
					if err != nil {
						return 0, nil, nil, fmt.Errorf("balance of %s: %w", rest, err)
					}
					balances[strings.TrimPrefix(rest, "account#")] = v
				}
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return n, byID, balances, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
