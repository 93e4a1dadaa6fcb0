// Package dynamo is the claimstore.Store on a DynamoDB table.
//
// The table has a string partition key (default attribute "pk"), no sort key,
// and TTL enabled on a number attribute (default "expires_at"); see the design
// document's table layout. Every operation is one conditional UpdateItem:
//
//   - Acquire writes the claim if the key is absent, released, past its lease
//     or past its expiry, incrementing the token, and returns the new row. If
//     the condition fails, ReturnValuesOnConditionCheckFailure=ALL_OLD returns
//     the blocking row with the failure, so no read is ever needed: a happy
//     path acquire and complete cost two requests and two write units.
//   - Renew, Complete and Release are conditioned on "token = mine AND
//     status = IN_PROGRESS"; a failed condition is claimstore.ErrLeaseLost.
//
// The lease and expiry comparisons use the store's clock, so the clocks of the
// workers sharing a table should agree to well within a lease's safety margin
// (NTP does this on AWS).
package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/claimfirst/claimfirst/claimstore"
)

var _ claimstore.Store = (*Store)(nil)

// Default attribute names: the contract between the code, template.yaml,
// localstack/ and any table a user creates.
const (
	// DefaultKeyAttribute is the table's partition key.
	DefaultKeyAttribute = "pk"
	// DefaultTTLAttribute is the table's TTL attribute (epoch seconds).
	DefaultTTLAttribute = "expires_at"
)

// The other attributes of a claim row.
const (
	attrStatus   = "status"
	attrToken    = "token"
	attrLease    = "lease_until"
	attrOwner    = "owner"
	attrAttempts = "attempts"
	attrResult   = "result"
)

// API is the part of *dynamodb.Client the store uses.
type API interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Config configures a Store.
type Config struct {
	// Client is the DynamoDB client, usually dynamodb.NewFromConfig. Required.
	Client API
	// Table is the claim table's name. Required.
	Table string
	// KeyAttribute is the table's partition key attribute. Defaults to "pk".
	KeyAttribute string
	// TTLAttribute is the table's TTL attribute. Defaults to "expires_at".
	TTLAttribute string
	// KeyPrefix is prepended to every key so that several consumers can share
	// a table; it counts toward claimstore.MaxKeyBytes. Defaults to "".
	KeyPrefix string
	// Now is the store's clock. Defaults to time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.KeyAttribute == "" {
		c.KeyAttribute = DefaultKeyAttribute
	}
	if c.TTLAttribute == "" {
		c.TTLAttribute = DefaultTTLAttribute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("Client is required"))
	}
	if c.Table == "" {
		errs = append(errs, errors.New("Table is required"))
	}
	if c.KeyAttribute == c.TTLAttribute {
		errs = append(errs, fmt.Errorf("KeyAttribute and TTLAttribute are both %q", c.KeyAttribute))
	}
	for _, name := range []string{attrStatus, attrToken, attrLease, attrOwner, attrAttempts, attrResult} {
		if c.KeyAttribute == name || c.TTLAttribute == name {
			errs = append(errs, fmt.Errorf("KeyAttribute and TTLAttribute must not be %q, which the store uses", name))
		}
	}
	return errors.Join(errs...)
}

// Store is a claimstore.Store on a DynamoDB table, safe for concurrent use.
type Store struct {
	cfg   Config
	table *string
	names map[string]string

	acquireUpdate, acquireCond *string
	heldCond                   *string
	renew, complete, release   holderWrite
}

// holderWrite is an update conditioned on the caller holding the claim, with
// the attribute names its expressions use (DynamoDB rejects unused ones),
// built once so that no request builds them again.
type holderWrite struct {
	op     string
	update *string
	names  map[string]string
}

// New returns a Store, or an error naming each bad field of cfg.
func New(cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("dynamo: %w", err)
	}
	s := &Store{
		cfg:   cfg,
		table: aws.String(cfg.Table),
		names: map[string]string{
			"#pk": cfg.KeyAttribute, "#ttl": cfg.TTLAttribute,
			"#status": attrStatus, "#token": attrToken, "#lease": attrLease,
			"#owner": attrOwner, "#attempts": attrAttempts, "#result": attrResult,
		},
		acquireUpdate: aws.String("SET #status = :inprogress, #token = if_not_exists(#token, :zero) + :one, " +
			"#attempts = if_not_exists(#attempts, :zero) + :one, #lease = :lease, #ttl = :ttl, #owner = :owner REMOVE #result"),
		acquireCond: aws.String("attribute_not_exists(#pk) OR #ttl <= :nowsec OR #status = :released OR " +
			"(#status = :inprogress AND #lease <= :nowms)"),
		heldCond: aws.String("#token = :token AND #status = :inprogress"),
	}
	s.renew = s.holderWrite("renew", "SET #lease = :lease", "#lease")
	s.complete = s.holderWrite("complete", "SET #status = :completed, #result = :result, #ttl = :ttl", "#result", "#ttl")
	s.release = s.holderWrite("release", "SET #status = :released")
	return s, nil
}

// holderWrite prepares an update whose expressions use names besides the
// condition's #token and #status.
func (s *Store) holderWrite(op, update string, names ...string) holderWrite {
	m := map[string]string{"#token": s.names["#token"], "#status": s.names["#status"]}
	for _, k := range names {
		m[k] = s.names[k]
	}
	return holderWrite{op: op, update: aws.String(update), names: m}
}

func (s *Store) key(k string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{s.cfg.KeyAttribute: str(s.cfg.KeyPrefix + k)}
}

// Acquire implements claimstore.Store with one conditional UpdateItem.
func (s *Store) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	now := s.cfg.Now()
	if err := p.Check(s.cfg.KeyPrefix, now); err != nil {
		return claimstore.Acquisition{}, err
	}
	out, err := s.cfg.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                s.table,
		Key:                      s.key(p.Key),
		UpdateExpression:         s.acquireUpdate,
		ConditionExpression:      s.acquireCond,
		ExpressionAttributeNames: s.names, // the acquire's expressions use every name
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":inprogress": str(string(claimstore.StatusInProgress)),
			":released":   str(string(claimstore.StatusReleased)),
			":zero":       num(0),
			":one":        num(1),
			":lease":      num(claimstore.LeaseMillis(p.LeaseUntil)),
			":ttl":        num(claimstore.ExpirySeconds(p.ExpiresAt)),
			":owner":      str(p.Owner),
			":nowsec":     num(now.Unix()),
			":nowms":      num(now.UnixMilli()),
		},
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			old, derr := s.decode(p.Key, ccf.Item)
			if derr != nil {
				return claimstore.Acquisition{}, fmt.Errorf("acquire %q: blocking row: %w", p.Key, derr)
			}
			return claimstore.Acquisition{Outcome: old.Blocked(), Claim: old}, nil
		}
		return claimstore.Acquisition{}, fmt.Errorf("acquire %q: %w", p.Key, err)
	}
	c, err := s.decode(p.Key, out.Attributes)
	if err != nil {
		return claimstore.Acquisition{}, fmt.Errorf("acquire %q: new row: %w", p.Key, err)
	}
	return claimstore.Acquisition{Outcome: claimstore.Acquired, Claim: c}, nil
}

// Renew implements claimstore.Store.
func (s *Store) Renew(ctx context.Context, p claimstore.RenewParams) error {
	if err := p.Check(s.cfg.KeyPrefix); err != nil {
		return err
	}
	return s.update(ctx, s.renew, p.Key, p.Token,
		map[string]types.AttributeValue{":lease": num(claimstore.LeaseMillis(p.LeaseUntil))})
}

// Complete implements claimstore.Store.
func (s *Store) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	if err := p.Check(s.cfg.KeyPrefix); err != nil {
		return err
	}
	return s.update(ctx, s.complete, p.Key, p.Token,
		map[string]types.AttributeValue{
			":completed": str(string(claimstore.StatusCompleted)),
			":result":    str(p.Result),
			":ttl":       num(claimstore.ExpirySeconds(p.ExpiresAt)),
		})
}

// Release implements claimstore.Store.
func (s *Store) Release(ctx context.Context, key string, token int64) error {
	if err := claimstore.CheckRelease(s.cfg.KeyPrefix, key, token); err != nil {
		return err
	}
	return s.update(ctx, s.release, key, token,
		map[string]types.AttributeValue{":released": str(string(claimstore.StatusReleased))})
}

// update runs one UpdateItem conditioned on token holding the claim.
func (s *Store) update(ctx context.Context, w holderWrite, key string, token int64, values map[string]types.AttributeValue) error {
	op := w.op
	values[":token"] = num(token)
	values[":inprogress"] = str(string(claimstore.StatusInProgress))
	_, err := s.cfg.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 s.table,
		Key:                       s.key(key),
		UpdateExpression:          w.update,
		ConditionExpression:       s.heldCond,
		ExpressionAttributeNames:  w.names,
		ExpressionAttributeValues: values,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return fmt.Errorf("%s %q token %d: %w", op, key, token, claimstore.ErrLeaseLost)
		}
		return fmt.Errorf("%s %q token %d: %w", op, key, token, err)
	}
	return nil
}

// Get implements claimstore.Store with a strongly consistent GetItem.
func (s *Store) Get(ctx context.Context, key string) (claimstore.Claim, error) {
	if err := claimstore.CheckKey(s.cfg.KeyPrefix, key); err != nil {
		return claimstore.Claim{}, err
	}
	out, err := s.cfg.Client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      s.table,
		Key:            s.key(key),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return claimstore.Claim{}, fmt.Errorf("get %q: %w", key, err)
	}
	if len(out.Item) == 0 {
		return claimstore.Claim{}, fmt.Errorf("get %q: %w", key, claimstore.ErrNotFound)
	}
	c, err := s.decode(key, out.Item)
	if err != nil {
		return claimstore.Claim{}, fmt.Errorf("get %q: %w", key, err)
	}
	if !c.Live(s.cfg.Now()) {
		return claimstore.Claim{}, fmt.Errorf("get %q: %w", key, claimstore.ErrNotFound)
	}
	return c, nil
}

// decode turns a row into a Claim; key is the caller's, without the prefix.
func (s *Store) decode(key string, item map[string]types.AttributeValue) (claimstore.Claim, error) {
	if len(item) == 0 {
		return claimstore.Claim{}, errors.New("empty item")
	}
	c := claimstore.Claim{Key: key}
	var errs []error
	getS := func(name string) string {
		if v, ok := item[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	getN := func(name string) int64 {
		v, ok := item[name].(*types.AttributeValueMemberN)
		if !ok {
			errs = append(errs, fmt.Errorf("attribute %q: missing or not a number", name))
			return 0
		}
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("attribute %q: %w", name, err))
		}
		return n
	}
	c.Status = claimstore.Status(getS(attrStatus))
	c.Token = getN(attrToken)
	c.LeaseUntil = time.UnixMilli(getN(attrLease))
	c.ExpiresAt = time.Unix(getN(s.cfg.TTLAttribute), 0)
	c.Attempts = getN(attrAttempts)
	c.Owner = getS(attrOwner)
	c.Result = getS(attrResult)
	switch c.Status {
	case claimstore.StatusInProgress, claimstore.StatusCompleted, claimstore.StatusReleased:
	default:
		errs = append(errs, fmt.Errorf("attribute %q: unknown status %q", attrStatus, c.Status))
	}
	return c, errors.Join(errs...)
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
