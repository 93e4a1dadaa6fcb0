package awstest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
)

type sharedTable struct {
	once   sync.Once
	name   string
	client *dynamodb.Client
	err    error
}

var tables sync.Map // prefix -> *sharedTable

// ClaimTable returns a client and a claim table on the emulator, created
// once per test binary and prefix and shared by the tests that ask for it
// (skipped, or failed under the launcher, without the emulator as Config
// is). Stores over it are separate processes sharing one table.
func ClaimTable(tb testing.TB, prefix string) (*dynamodb.Client, string) {
	tb.Helper()
	cfg := Config(tb)
	v, _ := tables.LoadOrStore(prefix, &sharedTable{})
	t := v.(*sharedTable)
	t.once.Do(func() {
		t.client = dynamodb.NewFromConfig(cfg)
		t.name = Name(prefix)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		t.err = dynamo.CreateTable(ctx, t.client, dynamo.TableSpec{Name: t.name})
	})
	if t.err != nil {
		tb.Fatalf("create claim table: %v", t.err)
	}
	return t.client, t.name
}
