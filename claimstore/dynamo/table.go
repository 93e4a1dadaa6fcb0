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
