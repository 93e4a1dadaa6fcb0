// Package ledger is a reference handler whose side effect is a DynamoDB
// write: each message {"entry_id", "account", "amount"} appends one entry
// to a ledger table and moves the account's balance by the amount, exactly
// once.
//
// Exactly once comes from the claim, not from the writes: the handler does
// not write at all while it runs. It commits its two writes with the claim's
// completion (worker.Message.Commit), and the claim store applies them in
// one DynamoDB transaction with the completion, conditioned on the claim
// still being held. So a worker that dies after the handler and before the
// completion has written nothing, and the redelivery applies the entry; one
// that was taken over (it stalled past its lease) has its transaction
// cancelled by the claim's condition and writes nothing; and a duplicate
// finds the claim completed and is acked without work. The balance update
// (ADD) is not idempotent by itself; it does not need to be.
//
// The ledger table has a string partition key (default "pk") and holds two
// kinds of row:
//
//	entry#<entry_id>   account, amount, token (the claim's fencing token)
//	account#<account>  balance (sum of amounts), entries (their count)
//
// The entry's Put is conditioned on the entry being absent too, so that an
// entry applied under another claim (its claim forgotten after the claim
// retention, or keyed differently) is never applied twice: the transaction is
// cancelled by that condition, and the handler completes the claim with
// ResultAlreadyApplied if the entry found is this one, or dead-letters the
// message if the entry id was used for another account or amount.
//
// A transactional write costs two write units per item: an entry costs six
// (the claim's completion, the entry, the balance), where writing the two
// rows outside the transaction and completing separately would cost three and
// could apply an entry twice.
package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/worker"
)

// MaxIDBytes is the longest entry id or account a message may carry.
const MaxIDBytes = 255

// Entry is one ledger message.
type Entry struct {
	// EntryID names the entry; it is the message's idempotency key.
	EntryID string `json:"entry_id"`
	// Account is the account whose balance moves.
	Account string `json:"account"`
	// Amount is added to the balance, in minor units; negative for a debit, never 0.
	Amount int64 `json:"amount"`
}

// Validate checks e's fields.
func (e Entry) Validate() error {
	var errs []error
	if e.EntryID == "" || len(e.EntryID) > MaxIDBytes {
		errs = append(errs, fmt.Errorf("entry_id must be 1 to %d bytes", MaxIDBytes))
	}
	if e.Account == "" || len(e.Account) > MaxIDBytes {
		errs = append(errs, fmt.Errorf("account must be 1 to %d bytes", MaxIDBytes))
	}
	if e.Amount == 0 {
		errs = append(errs, errors.New("amount must not be 0"))
	}
	return errors.Join(errs...)
}

// Fingerprint is what an entry is, for its claim: the same entry id with
// another account or amount is key reuse, not a duplicate.
func (e Entry) Fingerprint() string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s|%d:%s|%d", len(e.EntryID), e.EntryID, len(e.Account), e.Account, e.Amount)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// DecodeEntry parses a message body strictly: one JSON object with exactly
// the fields entry_id (string), account (string) and amount (an integer),
// each once, and nothing after it.
func DecodeEntry(data []byte) (Entry, error) {
	var e Entry
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return Entry{}, errors.New("ledger: not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Entry{}, fmt.Errorf("ledger: %w", err)
		}
		name, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return Entry{}, fmt.Errorf("ledger: %w", err)
		}
		if seen[name] {
			return Entry{}, fmt.Errorf("ledger: duplicate field %q", name)
		}
		seen[name] = true
		var ok bool
		switch name {
		case "entry_id":
			e.EntryID, ok = v.(string)
		case "account":
			e.Account, ok = v.(string)
		case "amount":
			n, isNum := v.(json.Number)
			var err error
			e.Amount, err = strconv.ParseInt(n.String(), 10, 64)
			if !isNum || err != nil {
				return Entry{}, errors.New("ledger: amount must be an integer in minor units")
			}
			ok = true
		default:
			return Entry{}, fmt.Errorf("ledger: unknown field %.40q", name)
		}
		if !ok {
			return Entry{}, fmt.Errorf("ledger: %s must be a string", name)
		}
	}
	if _, err := dec.Token(); err != nil {
		return Entry{}, fmt.Errorf("ledger: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Entry{}, errors.New("ledger: trailing data after the object")
	}
	for _, name := range []string{"entry_id", "account", "amount"} {
		if !seen[name] {
			return Entry{}, fmt.Errorf("ledger: %s is missing", name)
		}
	}
	if err := e.Validate(); err != nil {
		return Entry{}, fmt.Errorf("ledger: %w", err)
	}
	return e, nil
}

// Decoder is the worker.Decoder for ledger messages: the key is the entry
// id, the fingerprint covers every field, and an invalid body is poison.
type Decoder struct{}

var _ worker.Decoder = Decoder{}

// Decode implements worker.Decoder: m.Payload becomes an Entry.
func (Decoder) Decode(m *worker.Message) error {
	e, err := DecodeEntry([]byte(m.Body))
	if err != nil {
		return worker.Permanent("invalid ledger message", err)
	}
	m.Payload, m.Key, m.Fingerprint = e, e.EntryID, e.Fingerprint()
	return nil
}

// Results stored with a completed entry's claim.
const (
	// ResultApplied is the result of an entry this claim applied.
	ResultApplied = "applied"
	// ResultAlreadyApplied is the result of an entry found applied already
	// (under a claim since forgotten): nothing was written again.
	ResultAlreadyApplied = "already applied"
)

// Attribute names of the ledger table's rows besides the key.
const (
	AttrAccount = "account"
	AttrAmount  = "amount"
	AttrToken   = "token"
	AttrBalance = "balance"
	AttrEntries = "entries"
)

// DefaultKeyAttribute is the ledger table's partition key.
const DefaultKeyAttribute = "pk"

// EntryKey is the partition key of an entry's row.
func EntryKey(entryID string) string { return "entry#" + entryID }

// AccountKey is the partition key of an account's row.
func AccountKey(account string) string { return "account#" + account }

// Handler is the worker.Handler that applies ledger entries. Its writes go
// with the claim's completion, so the worker's claim store must be a
// *dynamo.Store (or another claimstore.TxCompleter taking dynamo.Writes).
type Handler struct {
	// Table is the ledger table. Required.
	Table string
	// KeyAttribute is the ledger table's partition key. Defaults to "pk".
	KeyAttribute string
}

var _ worker.Handler = Handler{}

// Handle implements worker.Handler: it commits the entry's two writes with
// the claim's completion and returns ResultApplied; it writes nothing itself.
func (h Handler) Handle(_ context.Context, m *worker.Message) (string, error) {
	e, ok := m.Payload.(Entry)
	if !ok {
		return "", worker.Permanentf("ledger: payload is %T, want ledger.Entry (use ledger.Decoder)", m.Payload)
	}
	if h.Table == "" {
		return "", errors.New("ledger: Handler.Table is not set")
	}
	m.Commit(worker.Tx{Writes: h.Writes(e, m.Token), Rejected: h.rejected(e)})
	return ResultApplied, nil
}

func (h Handler) keyAttr() string {
	if h.KeyAttribute != "" {
		return h.KeyAttribute
	}
	return DefaultKeyAttribute
}

// Writes are e's writes: the entry's Put, conditioned on its absence and
// returning the entry in the way if not, and the account's ADD.
func (h Handler) Writes(e Entry, token int64) dynamo.Writes {
	pk := h.keyAttr()
	table := aws.String(h.Table)
	return dynamo.Writes{
		{Put: &types.Put{
			TableName: table,
			Item: map[string]types.AttributeValue{
				pk:          &types.AttributeValueMemberS{Value: EntryKey(e.EntryID)},
				AttrAccount: &types.AttributeValueMemberS{Value: e.Account},
				AttrAmount:  &types.AttributeValueMemberN{Value: strconv.FormatInt(e.Amount, 10)},
				AttrToken:   &types.AttributeValueMemberN{Value: strconv.FormatInt(token, 10)},
			},
			ConditionExpression:                 aws.String("attribute_not_exists(#pk)"),
			ExpressionAttributeNames:            map[string]string{"#pk": pk},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}},
		{Update: &types.Update{
			TableName:                table,
			Key:                      map[string]types.AttributeValue{pk: &types.AttributeValueMemberS{Value: AccountKey(e.Account)}},
			UpdateExpression:         aws.String("ADD #balance :amount, #entries :one"),
			ExpressionAttributeNames: map[string]string{"#balance": AttrBalance, "#entries": AttrEntries},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":amount": &types.AttributeValueMemberN{Value: strconv.FormatInt(e.Amount, 10)},
				":one":    &types.AttributeValueMemberN{Value: "1"},
			},
		}},
	}
}

// rejected decides what a cancelled entry means: the entry exists. If it
// is this entry, it was applied before: the claim completes with
// ResultAlreadyApplied. If it is another (the id reused), the message is
// dead-lettered. Anything else is retried.
func (h Handler) rejected(e Entry) func(*claimstore.WriteConditionError) (string, error) {
	return func(wce *claimstore.WriteConditionError) (string, error) {
		if wce.Index != 0 {
			return "", wce
		}
		old, _ := wce.Item.(map[string]types.AttributeValue)
		acct, _ := old[AttrAccount].(*types.AttributeValueMemberS)
		amt, _ := old[AttrAmount].(*types.AttributeValueMemberN)
		if acct != nil && amt != nil && acct.Value == e.Account && amt.Value == strconv.FormatInt(e.Amount, 10) {
			return ResultAlreadyApplied, nil
		}
		return "", &worker.PermanentError{Code: worker.CodeKeyReused, Reason: fmt.Sprintf("entry_id %q already applied with another account or amount", e.EntryID)}
	}
}

// TableAPI is the part of *dynamodb.Client that CreateTable uses.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// CreateTable creates an on-demand ledger table with a string partition
// key "pk" if it does not exist, and waits until it is active: for
// development and tests.
func CreateTable(ctx context.Context, api TableAPI, name string) error {
	_, err := api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(DefaultKeyAttribute), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(DefaultKeyAttribute), KeyType: types.KeyTypeHash}},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("ledger: create table %s: %w", name, err)
	}
	w := dynamodb.NewTableExistsWaiter(api, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 100 * time.Millisecond })
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, 5*time.Minute); err != nil {
		return fmt.Errorf("ledger: wait for table %s: %w", name, err)
	}
	return nil
}

// Account is an account's row.
type Account struct {
	// Balance is the sum of the applied entries' amounts.
	Balance int64
	// Entries is how many entries were applied.
	Entries int64
}

// GetAPI is the part of *dynamodb.Client that ReadAccount uses.
type GetAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// ReadAccount reads an account's row with a strongly consistent read; an
// account with no entries is the zero Account.
func ReadAccount(ctx context.Context, api GetAPI, table, account string) (Account, error) {
	out, err := api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{DefaultKeyAttribute: &types.AttributeValueMemberS{Value: AccountKey(account)}},
	})
	if err != nil {
		return Account{}, fmt.Errorf("ledger: read account %q: %w", account, err)
	}
	var a Account
	for name, dst := range map[string]*int64{AttrBalance: &a.Balance, AttrEntries: &a.Entries} {
		if v, ok := out.Item[name].(*types.AttributeValueMemberN); ok {
			if *dst, err = strconv.ParseInt(v.Value, 10, 64); err != nil {
				return Account{}, fmt.Errorf("ledger: account %q %s: %w", account, name, err)
			}
		}
	}
	return a, nil
}
