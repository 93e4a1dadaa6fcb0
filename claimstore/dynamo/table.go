package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// TableAPI is the part of *dynamodb.Client that CreateTable uses.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
}

// TableSpec names a claim table and its attributes.
type TableSpec struct {
	// Name is the table's name. Required.
	Name string
	// KeyAttribute is the partition key. Defaults to "pk".
	KeyAttribute string
	// TTLAttribute is the TTL attribute. Defaults to "expires_at".
	TTLAttribute string
}

// CreateTable creates the claim table described by spec (on-demand capacity,
// TTL enabled) if it does not exist, waits until it is active, and makes sure
// TTL is enabled on the right attribute. It is idempotent: for development,
// tests and `worker setup`; production tables come from template.yaml.
func CreateTable(ctx context.Context, api TableAPI, spec TableSpec) error {
	if spec.Name == "" {
		return errors.New("dynamo: create table: Name is required")
	}
	if spec.KeyAttribute == "" {
		spec.KeyAttribute = DefaultKeyAttribute
	}
	if spec.TTLAttribute == "" {
		spec.TTLAttribute = DefaultTTLAttribute
	}
	_, err := api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(spec.Name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(spec.KeyAttribute), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(spec.KeyAttribute), KeyType: types.KeyTypeHash}},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamo: create table %s: %w", spec.Name, err)
	}
	waiter := dynamodb.NewTableExistsWaiter(api, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 100 * time.Millisecond
		o.MaxDelay = 2 * time.Second
	})
	desc, err := waiter.WaitForOutput(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(spec.Name)}, 5*time.Minute)
	if err != nil {
		return fmt.Errorf("dynamo: wait for table %s: %w", spec.Name, err)
	}
	if err := checkKeySchema(desc.Table, spec); err != nil {
		return err
	}
	ttl, err := api.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(spec.Name)})
	if err != nil {
		return fmt.Errorf("dynamo: describe TTL of %s: %w", spec.Name, err)
	}
	if d := ttl.TimeToLiveDescription; d != nil && aws.ToString(d.AttributeName) == spec.TTLAttribute &&
		(d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		return nil
	}
	_, err = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(spec.Name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(spec.TTLAttribute),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		return fmt.Errorf("dynamo: enable TTL on %s.%s: %w", spec.Name, spec.TTLAttribute, err)
	}
	return nil
}

func checkKeySchema(t *types.TableDescription, spec TableSpec) error {
	if t == nil {
		return fmt.Errorf("dynamo: table %s: no description", spec.Name)
	}
	var got []string
	for _, k := range t.KeySchema {
		got = append(got, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	want := spec.KeyAttribute + " " + string(types.KeyTypeHash)
	if len(got) != 1 || got[0] != want {
		return fmt.Errorf("dynamo: table %s has key schema [%s], want [%s] (a string partition key and no sort key)",
			spec.Name, strings.Join(got, ", "), want)
	}
	return nil
}

// CheckAPI is the part of *dynamodb.Client that CheckTable uses.
type CheckAPI interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
}

// ErrTable marks a claim table the store cannot work with: absent, keyed
// other than by a string partition key, without TTL on its TTL attribute, or
// not describable with the caller's permissions.
var ErrTable = errors.New("claim table unusable")

// TableError is what CheckTable found wrong with a table.
type TableError struct {
	// Table is the table's name.
	Table string
	// Problem says what is wrong, in words.
	Problem string
	// Err is the DynamoDB error behind Problem, or nil.
	Err error
}

// Error implements error.
func (e *TableError) Error() string {
	var nf *types.ResourceNotFoundException
	if e.Err != nil && !errors.As(e.Err, &nf) { // "not found" says nothing more
		return fmt.Sprintf("claim table %q: %s: %v", e.Table, e.Problem, e.Err)
	}
	return fmt.Sprintf("claim table %q: %s", e.Table, e.Problem)
}

// Unwrap returns Err.
func (e *TableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrTable) true.
func (e *TableError) Is(target error) bool { return target == ErrTable }

// CheckTable describes the table and its TTL (two requests) and returns a
// *TableError when the store cannot work with it: absent, not keyed by a
// string partition key spec.KeyAttribute alone, TTL not enabled on
// spec.TTLAttribute, or no permission to describe it (the worker's role
// needs dynamodb:DescribeTable and dynamodb:DescribeTimeToLive).
func CheckTable(ctx context.Context, api CheckAPI, spec TableSpec) error {
	if spec.KeyAttribute == "" {
		spec.KeyAttribute = DefaultKeyAttribute
	}
	if spec.TTLAttribute == "" {
		spec.TTLAttribute = DefaultTTLAttribute
	}
	fail := func(problem string, err error) error {
		return &TableError{Table: spec.Name, Problem: problem, Err: err}
	}
	desc, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(spec.Name)})
	if err != nil {
		return fail(describeProblem(err, "dynamodb:DescribeTable"), err)
	}
	if err := checkKeySchema(desc.Table, spec); err != nil {
		return fail(strings.TrimPrefix(err.Error(), "dynamo: table "+spec.Name+" "), nil)
	}
	for _, d := range desc.Table.AttributeDefinitions {
		if aws.ToString(d.AttributeName) == spec.KeyAttribute && d.AttributeType != types.ScalarAttributeTypeS {
			return fail(fmt.Sprintf("partition key %q is of type %s, want a string (S)", spec.KeyAttribute, d.AttributeType), nil)
		}
	}
	ttl, err := api.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(spec.Name)})
	if err != nil {
		return fail(describeProblem(err, "dynamodb:DescribeTimeToLive"), err)
	}
	d := ttl.TimeToLiveDescription
	if d == nil || (d.TimeToLiveStatus != types.TimeToLiveStatusEnabled && d.TimeToLiveStatus != types.TimeToLiveStatusEnabling) {
		return fail(fmt.Sprintf("TTL is not enabled, want it on %q (completed claims would never expire)", spec.TTLAttribute), nil)
	}
	if got := aws.ToString(d.AttributeName); got != spec.TTLAttribute {
		return fail(fmt.Sprintf("TTL is on %q, want it on %q (completed claims would never expire)", got, spec.TTLAttribute), nil)
	}
	return nil
}

// describeProblem names why a describe request failed.
func describeProblem(err error, action string) string {
	var nf *types.ResourceNotFoundException
	var api smithy.APIError
	switch {
	case errors.As(err, &nf):
		return "does not exist (create it with `worker setup`, or deploy template.yaml)"
	case errors.As(err, &api) && (api.ErrorCode() == "AccessDeniedException" || api.ErrorCode() == "UnrecognizedClientException"):
		return "no permission to describe it (" + action + ")"
	}
	return "cannot describe it"
}
