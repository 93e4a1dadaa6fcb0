package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/claimfirst/claimfirst/internal/awstest"
)

// TestClaimTableCheckedAtStart: a claim table that is absent, keyed wrong
// or without TTL on expires_at is refused when `worker run` starts, exit 2
// with one line naming the table and what is wrong, instead of failing at
// the first message.
func TestClaimTableCheckedAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	table := func(key string, keyType ddbtypes.ScalarAttributeType) string {
		name := awstest.Name("badclaims")
		_, err := e.ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName: aws.String(name), BillingMode: ddbtypes.BillingModePayPerRequest,
			AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String(key), AttributeType: keyType}},
			KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String(key), KeyType: ddbtypes.KeyTypeHash}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
	noTTL := table("pk", ddbtypes.ScalarAttributeTypeS)
	wrongKey := table("id", ddbtypes.ScalarAttributeTypeS)
	numberKey := table("pk", ddbtypes.ScalarAttributeTypeN)
	cases := []struct {
		name  string
		table string
		wants []string
	}{
		{"absent", "nosuch", []string{`"nosuch"`, "does not exist"}},
		{"wrong key", wrongKey, []string{wrongKey, "key schema", "pk"}},
		{"number key", numberKey, []string{numberKey, "pk", "string"}},
		{"no TTL", noTTL, []string{noTTL, "TTL", "expires_at"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { // not parallel: e.start is not safe for concurrent use
			p := e.start(tc.name, workerOptions{extraEnv: []string{"CLAIM_TABLE=" + tc.table}})
			if code := p.wait(t, 30*time.Second); code != 2 {
				t.Fatalf("exit %d, want 2; output:\n%s", code, p.log.String())
			}
			out := p.log.String()
			if p.logCount("worker started") != 0 {
				t.Errorf("worker started with a bad claim table:\n%s", out)
			}
			last := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
			t.Logf("refused: %s", last)
			if strings.Contains(last, "worker: worker:") {
				t.Errorf("doubled prefix: %s", last)
			}
			for _, w := range tc.wants {
				if !strings.Contains(last, w) {
					t.Errorf("last line %q does not name %q", last, w)
				}
			}
		})
	}
}

// TestLedgerTableCheckedAtStart: with HANDLER=ledger, an absent ledger table
// is refused at start, exit 2, naming it.
func TestLedgerTableCheckedAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	p := e.start("ledger", ledgerWorker("nosuch-ledger"))
	if code := p.wait(t, 30*time.Second); code != 2 {
		t.Fatalf("exit %d, want 2; output:\n%s", code, p.log.String())
	}
	out := strings.TrimSpace(p.log.String())
	last := out[strings.LastIndex(out, "\n")+1:]
	t.Logf("refused: %s", last)
	for _, w := range []string{"LEDGER_TABLE", `"nosuch-ledger"`, "does not exist"} {
		if !strings.Contains(last, w) {
			t.Errorf("last line %q does not name %q", last, w)
		}
	}
}
