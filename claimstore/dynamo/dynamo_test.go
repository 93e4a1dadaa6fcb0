package dynamo_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/claimstoretest"
	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awsreq"
	"github.com/claimfirst/claimfirst/internal/awstest"
)

// table creates one claim table per test binary on the emulator.
var table = struct {
	once sync.Once
	name string
	err  error
}{}

func client(t testing.TB, counter *awsreq.Counter) *dynamodb.Client {
	t.Helper()
	cfg := awstest.Config(t)
	if counter != nil {
		cfg.APIOptions = append(cfg.APIOptions, counter.APIOption())
	}
	c := dynamodb.NewFromConfig(cfg)
	table.once.Do(func() {
		table.name = awstest.Name("claims")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		table.err = dynamo.CreateTable(ctx, c, dynamo.TableSpec{Name: table.name})
	})
	if table.err != nil {
		t.Fatalf("create table: %v", table.err)
	}
	return c
}

func newStore(t testing.TB, c *dynamodb.Client, now func() time.Time) *dynamo.Store {
	t.Helper()
	s, err := dynamo.New(dynamo.Config{Client: c, Table: table.name, KeyPrefix: "svc#", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	c := client(t, nil)
	claimstoretest.Run(t, "dynamo", func(t *testing.T, clock *claimstoretest.Clock) claimstore.Store {
		return newStore(t, c, clock.Now)
	}, claimstoretest.Options{KeyPrefix: "svc#", Prefixed: func(t *testing.T, clock *claimstoretest.Clock, prefix string) claimstore.Store {
		s, err := dynamo.New(dynamo.Config{Client: c, Table: table.name, KeyPrefix: prefix, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}})
}

// TestHappyPathRequests counts what one message costs: a claim and a
// completion are two conditional writes, and nothing reads.
func TestHappyPathRequests(t *testing.T) {
	t.Parallel()
	counter := awsreq.NewCounter()
	s := newStore(t, client(t, counter), time.Now)
	counter.Reset()
	ctx := context.Background()
	now := time.Now()
	a, err := s.Acquire(ctx, claimstore.AcquireParams{Key: awstest.Name("pay"), Owner: "w", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil || a.Outcome != claimstore.Acquired {
		t.Fatalf("Acquire = %v, %v", a.Outcome, err)
	}
	if err := s.Complete(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "ch_1", ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := counter.Service("DynamoDB"); got != 2 {
		t.Errorf("DynamoDB requests for acquire + complete = %d (%v), want 2", got, counter.Snapshot())
	}
	if put, upd := counter.Count("DynamoDB.PutItem"), counter.Count("DynamoDB.UpdateItem"); put != 1 || upd != 1 {
		t.Errorf("acquire + complete = %d PutItem and %d UpdateItem, want one of each", put, upd)
	}
	if got := counter.Count("DynamoDB.GetItem"); got != 0 {
		t.Errorf("GetItem requests = %d, want 0", got)
	}

	// A duplicate costs one request too: the blocking row comes back with the
	// failed condition.
	counter.Reset()
	d, err := s.Acquire(ctx, claimstore.AcquireParams{Key: a.Claim.Key, Owner: "w2", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil || d.Outcome != claimstore.Duplicate || d.Claim.Result != "ch_1" {
		t.Fatalf("duplicate Acquire = %+v, %v", d, err)
	}
	if got := counter.Service("DynamoDB"); got != 1 {
		t.Errorf("DynamoDB requests for a duplicate = %d, want 1", got)
	}

	// A takeover of a released claim costs two: the put that finds the row,
	// and the update conditioned on the token it saw.
	key := awstest.Name("pay")
	r, err := s.Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: "w", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, claimstore.ReleaseParams{Holder: r.Claim.Holder()}); err != nil {
		t.Fatal(err)
	}
	counter.Reset()
	tk, err := s.Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: "w2", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil || tk.Outcome != claimstore.Acquired || tk.Claim.Token != 2 {
		t.Fatalf("takeover Acquire = %+v, %v", tk, err)
	}
	if put, upd, all := counter.Count("DynamoDB.PutItem"), counter.Count("DynamoDB.UpdateItem"), counter.Service("DynamoDB"); put != 1 || upd != 1 || all != 2 {
		t.Errorf("takeover = %d PutItem, %d UpdateItem, %d in all; want 1, 1, 2", put, upd, all)
	}
}

// TestRowLayout checks the attribute names and types other tools rely on
// (template.yaml, localstack/, a user's own table).
func TestRowLayout(t *testing.T) {
	t.Parallel()
	c := client(t, nil)
	s := newStore(t, c, time.Now)
	ctx := context.Background()
	key := awstest.Name("pay")
	now := time.Now()
	a, err := s.Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: "w1", Fingerprint: "fp1", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "ch_9", ExpiresAt: now.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table.name),
		Key:       map[string]typesAV{"pk": &typesS{Value: claimstore.StoredKey("svc#", key)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"pk": "S", "status": "S", "token": "N", "acq": "S", "lease_until": "N",
		"expires_at": "N", "first_at": "N", "fingerprint": "S", "owner": "S", "attempts": "N", "result": "S",
	}
	for name, typ := range want {
		v, ok := out.Item[name]
		if !ok {
			t.Errorf("attribute %s missing from %v", name, out.Item)
			continue
		}
		if got := avType(v); got != typ {
			t.Errorf("attribute %s has type %s, want %s", name, got, typ)
		}
	}
	if s := out.Item["status"].(*typesS).Value; s != "COMPLETED" {
		t.Errorf("status = %s, want COMPLETED", s)
	}
	exp := out.Item["expires_at"].(*typesN).Value
	if want := claimstore.ExpirySeconds(now.Add(2 * time.Hour)); exp != itoa(want) {
		t.Errorf("expires_at = %s, want %d (epoch seconds)", exp, want)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := dynamo.New(dynamo.Config{TTLAttribute: "pk"})
	if err == nil {
		t.Fatal("New accepted an empty config")
	}
	for _, want := range []string{"Client is required", "Table is required", `both "pk"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestCreateTableIsIdempotent(t *testing.T) {
	t.Parallel()
	c := client(t, nil)
	ctx := context.Background()
	spec := dynamo.TableSpec{Name: awstest.Name("claims-idem")}
	for range 2 {
		if err := dynamo.CreateTable(ctx, c, spec); err != nil {
			t.Fatal(err)
		}
	}
	ttl, err := c.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(spec.Name)})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(ttl.TimeToLiveDescription.AttributeName); got != dynamo.DefaultTTLAttribute {
		t.Errorf("TTL attribute = %q, want %q", got, dynamo.DefaultTTLAttribute)
	}
	err = dynamo.CreateTable(ctx, c, dynamo.TableSpec{Name: spec.Name, KeyAttribute: "id"})
	if err == nil || !strings.Contains(err.Error(), "key schema") {
		t.Errorf("CreateTable over a table with another key: err = %v, want a key schema error", err)
	}
}
