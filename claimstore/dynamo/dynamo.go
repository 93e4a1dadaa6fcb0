// Package dynamo is the claimstore.Store on a DynamoDB table.
//
// The table has a string partition key (default attribute "pk"), no sort key,
// and TTL enabled on a number attribute (default "expires_at"); the
// repository's docs/protocol.md describes each attribute of the row with its
// type and unit. Every operation is a conditional write, and none reads
// first:
//
//   - Acquire puts the whole new row (token 1, a new acq) guarded by
//     attribute_not_exists(pk). If the condition fails,
//     ReturnValuesOnConditionCheckFailure=ALL_OLD returns the row in the
//     way with the failure, and claimstore.Claim.Decide says what it means:
//     the caller's own applied write, key reuse, a duplicate, a live holder,
//     or a takeover: one UpdateItem conditioned on the token seen, which
//     increments it and keeps first_at. A happy-path acquire and complete
//     cost two requests and two write units; a takeover three.
//   - Renew, Complete and Release are conditioned on "acq = mine AND
//     status = IN_PROGRESS", asking for ALL_OLD on failure: a row already in
//     the requested state with the caller's acq is its own applied write
//     (success); any other failed condition is claimstore.ErrLeaseLost.
//   - CompleteTx is Complete with the caller's own writes in one
//     TransactWriteItems, the completion first; its cancellation reasons
//     say whose condition failed (see Store.CompleteTx).
//
// The lease and expiry comparisons use the store's clock, so the clocks of the
// workers sharing a table should agree to well within a lease's safety margin
// (NTP does this on AWS).
package dynamo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

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
	attrStatus      = "status"
	attrToken       = "token"
	attrAcq         = "acq"
	attrLease       = "lease_until"
	attrFirstAt     = "first_at"
	attrFingerprint = "fingerprint"
	attrOwner       = "owner"
	attrAttempts    = "attempts"
	attrResult      = "result"
	attrLastError   = "last_error"
)

// rowAttributes are the attributes the store writes besides the key and TTL.
var rowAttributes = []string{attrStatus, attrToken, attrAcq, attrLease, attrFirstAt, attrFingerprint, attrOwner, attrAttempts, attrResult, attrLastError}

// API is the part of *dynamodb.Client the store uses.
type API interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
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
	// KeyPrefix is prepended to every key, with claimstore.KeySeparator
	// between them (claimstore.StoredKey), so that several consumers can
	// share a table; it counts toward claimstore.MaxKeyBytes. Defaults to "".
	KeyPrefix string
	// Now is the store's clock: it stamps first_at and judges whether a
	// lease has ended (a takeover). Defaults to time.Now.
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
	if strings.Contains(c.KeyPrefix, claimstore.KeySeparator) {
		errs = append(errs, errors.New("KeyPrefix must not contain the key separator U+001F"))
	}
	if c.KeyAttribute == c.TTLAttribute {
		errs = append(errs, fmt.Errorf("KeyAttribute and TTLAttribute are both %q", c.KeyAttribute))
	}
	for _, name := range rowAttributes {
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

	absent                   *string
	takeoverCond             *string
	renew, complete, release holderWrite
}

// holderWrite is an update conditioned on the caller holding the claim, with
// the attribute names its expressions use (DynamoDB rejects unused ones),
// built once so that no request builds them again.
type holderWrite struct {
	op     string
	target claimstore.Status // the status an applied write leaves
	update *string
	cond   *string
	names  map[string]string
}

// New returns a Store, or an error naming each bad field of cfg.
func New(cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("dynamo: %w", err)
	}
	s := &Store{
		cfg:    cfg,
		table:  aws.String(cfg.Table),
		absent: aws.String("attribute_not_exists(#pk)"),
		takeoverCond: aws.String("#token = :seen AND (#ttl <= :nowsec OR #status = :released OR " +
			"(#status = :inprogress AND #lease <= :nowms))"),
	}
	s.renew = s.holderWrite("renew", claimstore.StatusInProgress, "SET #lease = :lease, #ttl = :ttl", "#lease", "#ttl")
	s.complete = s.holderWrite("complete", claimstore.StatusCompleted, "SET #status = :completed, #result = :result, #ttl = :ttl", "#result", "#ttl")
	s.release = s.holderWrite("release", claimstore.StatusReleased, "SET #status = :released")
	return s, nil
}

// Check describes the store's table once (two requests, at start; none per
// claim) and returns a *TableError wrapping ErrTable when the store cannot
// work with it: absent, keyed wrong, without TTL on TTLAttribute, or not
// describable. It checks nothing, and returns nil, when Client cannot
// describe tables (is not a CheckAPI).
func (s *Store) Check(ctx context.Context) error {
	api, ok := s.cfg.Client.(CheckAPI)
	if !ok {
		return nil
	}
	return CheckTable(ctx, api, TableSpec{Name: s.cfg.Table, KeyAttribute: s.cfg.KeyAttribute, TTLAttribute: s.cfg.TTLAttribute})
}

// name returns the attribute name behind an expression placeholder.
func (s *Store) name(placeholder string) string {
	switch placeholder {
	case "#pk":
		return s.cfg.KeyAttribute
	case "#ttl":
		return s.cfg.TTLAttribute
	}
	return map[string]string{
		"#status": attrStatus, "#token": attrToken, "#acq": attrAcq, "#lease": attrLease,
		"#first": attrFirstAt, "#fp": attrFingerprint, "#owner": attrOwner, "#attempts": attrAttempts,
		"#result": attrResult, "#lasterr": attrLastError,
	}[placeholder]
}

// names maps each placeholder to its attribute name.
func (s *Store) names(placeholders ...string) map[string]string {
	m := make(map[string]string, len(placeholders))
	for _, p := range placeholders {
		m[p] = s.name(p)
	}
	return m
}

// holderWrite prepares an update whose expressions use names besides the
// condition's #acq and #status.
func (s *Store) holderWrite(op string, target claimstore.Status, update string, names ...string) holderWrite {
	return holderWrite{
		op: op, target: target, update: aws.String(update),
		cond:  aws.String("#acq = :acq AND #status = :inprogress"),
		names: s.names(append([]string{"#acq", "#status"}, names...)...),
	}
}

func (s *Store) key(k string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{s.cfg.KeyAttribute: str(claimstore.StoredKey(s.cfg.KeyPrefix, k))}
}

// maxTakeovers bounds the takeover attempts of one Acquire: each failed one
// means another acquirer moved the row on, and the next look decides anew.
const maxTakeovers = 3

// Acquire implements claimstore.Store: one conditional PutItem on the happy
// path, and one UpdateItem more to take a row over.
func (s *Store) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	now := s.cfg.Now()
	if err := p.Check(s.cfg.KeyPrefix, now); err != nil {
		return claimstore.Acquisition{}, err
	}
	if p.Acq == "" {
		p.Acq = claimstore.NewAcq()
	}
	c := claimstore.NewClaim(p, now)
	var prev *claimstore.Claim // the row a takeover wrote over
	_, err := s.cfg.Client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           s.table,
		Item:                                s.item(c),
		ConditionExpression:                 s.absent,
		ExpressionAttributeNames:            s.names("#pk"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	old, err := s.conditionFailed(p.Key, err)
	for try := 0; ; try++ {
		switch {
		case err != nil:
			return claimstore.Acquisition{}, fmt.Errorf("acquire %q: %w", p.Key, err)
		case old == nil:
			return claimstore.Acquisition{Outcome: claimstore.Acquired, Claim: c, Previous: prev}, nil
		}
		outcome, take := old.Decide(p, now)
		if !take {
			return claimstore.Acquisition{Outcome: outcome, Claim: *old}, nil
		}
		if try == maxTakeovers {
			// Still takeable after every lost race: someone else keeps
			// winning, which is what held elsewhere means to the caller.
			return claimstore.Acquisition{Outcome: claimstore.HeldElsewhere, Claim: *old}, nil
		}
		c, prev = old.Takeover(p, now), old
		old, err = s.takeover(ctx, old.Token, c, now)
	}
}

// takeover writes c over the row whose token was seen, if that row may still
// be taken over. It returns the row in the way if the condition failed.
func (s *Store) takeover(ctx context.Context, seen int64, c claimstore.Claim, now time.Time) (*claimstore.Claim, error) {
	set := "SET #status = :inprogress, #token = :token, #acq = :acq, #lease = :lease, #ttl = :ttl, " +
		"#first = :first, #owner = :owner, #attempts = :attempts"
	remove := " REMOVE #result"
	names := []string{"#status", "#token", "#acq", "#lease", "#ttl", "#first", "#owner", "#attempts", "#result"}
	values := map[string]types.AttributeValue{
		":inprogress": str(string(claimstore.StatusInProgress)),
		":released":   str(string(claimstore.StatusReleased)),
		":seen":       num(seen),
		":token":      num(c.Token),
		":acq":        str(c.Acq),
		":lease":      num(c.LeaseUntil.UnixMilli()),
		":ttl":        num(c.ExpiresAt.Unix()),
		":first":      num(c.FirstAt.UnixMilli()),
		":owner":      str(c.Owner),
		":attempts":   num(c.Attempts),
		":nowsec":     num(now.Unix()),
		":nowms":      num(now.UnixMilli()),
	}
	names = append(names, "#fp", "#lasterr")
	if c.Fingerprint != "" {
		set += ", #fp = :fp"
		values[":fp"] = str(c.Fingerprint)
	} else {
		remove += ", #fp"
	}
	if c.LastError != "" {
		set += ", #lasterr = :lasterr"
		values[":lasterr"] = str(c.LastError)
	} else {
		remove += ", #lasterr"
	}
	_, err := s.cfg.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           s.table,
		Key:                                 s.key(c.Key),
		UpdateExpression:                    aws.String(set + remove),
		ConditionExpression:                 s.takeoverCond,
		ExpressionAttributeNames:            s.names(names...),
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	return s.conditionFailed(c.Key, err)
}

// conditionFailed sorts a conditional write's error: nil, nil when it was
// applied; the row in the way when its condition failed; else the error.
func (s *Store) conditionFailed(key string, err error) (*claimstore.Claim, error) {
	if err == nil {
		return nil, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return nil, err
	}
	if len(ccf.Item) == 0 {
		// The row vanished between the condition and the answer (TTL
		// deletion); nothing stands in the way, but nothing was written.
		return nil, fmt.Errorf("condition failed without a row: %w", err)
	}
	old, derr := s.decode(key, ccf.Item)
	if derr != nil {
		return nil, fmt.Errorf("row in the way: %w", derr)
	}
	return &old, nil
}

// item is c as a row.
func (s *Store) item(c claimstore.Claim) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{
		s.cfg.KeyAttribute: str(claimstore.StoredKey(s.cfg.KeyPrefix, c.Key)),
		attrStatus:         str(string(c.Status)),
		attrToken:          num(c.Token),
		attrAcq:            str(c.Acq),
		attrLease:          num(c.LeaseUntil.UnixMilli()),
		s.cfg.TTLAttribute: num(c.ExpiresAt.Unix()),
		attrFirstAt:        num(c.FirstAt.UnixMilli()),
		attrOwner:          str(c.Owner),
		attrAttempts:       num(c.Attempts),
	}
	if c.Fingerprint != "" {
		it[attrFingerprint] = str(c.Fingerprint)
	}
	return it
}

// Renew implements claimstore.Store.
func (s *Store) Renew(ctx context.Context, p claimstore.RenewParams) error {
	if err := p.Check(s.cfg.KeyPrefix); err != nil {
		return err
	}
	w := s.renew
	values := map[string]types.AttributeValue{
		":lease": num(claimstore.LeaseMillis(p.LeaseUntil)),
		":ttl":   num(claimstore.ExpirySeconds(p.RenewExpiry())),
	}
	if p.LastError != "" {
		w.update = aws.String(*w.update + ", #lasterr = :lasterr")
		w.names = maps.Clone(w.names)
		w.names["#lasterr"] = attrLastError
		values[":lasterr"] = str(claimstore.TruncateLastError(p.LastError))
	}
	return s.update(ctx, w, p.Holder, values)
}

// Complete implements claimstore.Store.
func (s *Store) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	if err := p.Check(s.cfg.KeyPrefix); err != nil {
		return err
	}
	err := s.update(ctx, s.complete, p.Holder, map[string]types.AttributeValue{
		":completed": str(string(claimstore.StatusCompleted)),
		":result":    str(p.Result),
		":ttl":       num(claimstore.ExpirySeconds(p.ExpiresAt)),
	})
	return validationRefused(err)
}

// validationRefused marks DynamoDB's ValidationException at a completion
// (an item over 400 KB, a value it will not take) as
// claimstore.ErrResultTooLarge: the result was refused, which no retry
// changes, and the table is not down.
func validationRefused(err error) error {
	var api smithy.APIError
	if err != nil && errors.As(err, &api) && api.ErrorCode() == "ValidationException" {
		return fmt.Errorf("%w: %w", claimstore.ErrResultTooLarge, err)
	}
	return err
}

// Release implements claimstore.Store.
func (s *Store) Release(ctx context.Context, p claimstore.ReleaseParams) error {
	if err := p.Check(s.cfg.KeyPrefix); err != nil {
		return err
	}
	w := s.release
	values := map[string]types.AttributeValue{":released": str(string(claimstore.StatusReleased))}
	if p.LastError != "" {
		w.update = aws.String(*w.update + ", #lasterr = :lasterr")
		w.names = maps.Clone(w.names)
		w.names["#lasterr"] = attrLastError
		values[":lasterr"] = str(claimstore.TruncateLastError(p.LastError))
	}
	return s.update(ctx, w, p.Holder, values)
}

// update runs one UpdateItem conditioned on h holding the claim. A failed
// condition whose row shows h's acquisition already in w's target state is
// h's own earlier try, applied: success.
func (s *Store) update(ctx context.Context, w holderWrite, h claimstore.Holder, values map[string]types.AttributeValue) error {
	values[":acq"] = str(h.Acq)
	values[":inprogress"] = str(string(claimstore.StatusInProgress))
	_, err := s.cfg.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           s.table,
		Key:                                 s.key(h.Key),
		UpdateExpression:                    w.update,
		ConditionExpression:                 w.cond,
		ExpressionAttributeNames:            w.names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	old, err := s.conditionFailed(h.Key, err)
	switch {
	case err != nil && old == nil:
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return fmt.Errorf("%s %q token %d: %w", w.op, h.Key, h.Token, claimstore.ErrLeaseLost)
		}
		return fmt.Errorf("%s %q token %d: %w", w.op, h.Key, h.Token, err)
	case old == nil:
		return nil
	case old.Acq == h.Acq && old.Status == w.target:
		return nil
	default:
		return fmt.Errorf("%s %q token %d: %w", w.op, h.Key, h.Token, claimstore.ErrLeaseLost)
	}
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
	c.Acq = getS(attrAcq)
	c.LeaseUntil = time.UnixMilli(getN(attrLease))
	c.ExpiresAt = time.Unix(getN(s.cfg.TTLAttribute), 0)
	if _, ok := item[attrFirstAt]; ok { // absent on rows written before it was stored
		c.FirstAt = time.UnixMilli(getN(attrFirstAt))
	}
	c.Fingerprint = getS(attrFingerprint)
	c.Attempts = getN(attrAttempts)
	c.Owner = getS(attrOwner)
	c.Result = getS(attrResult)
	c.LastError = getS(attrLastError)
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
