package demo

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
	"github.com/claimfirst/claimfirst/internal/awstest"
	ledgerpkg "github.com/claimfirst/claimfirst/ledger"
)

// dynamoTable returns a client and a fresh claim table on the emulator.
func dynamoTable(t *testing.T) (*dynamodb.Client, string) {
	t.Helper()
	cfg := awstest.Config(t)
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	cfg.HTTPClient = &http.Client{Transport: tr}
	client := dynamodb.NewFromConfig(cfg)
	table := awstest.Name("demo")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := dynamo.CreateTable(ctx, client, dynamo.TableSpec{Name: table}); err != nil {
		t.Fatalf("create table: %v", err)
	}
	return client, table
}

// TestRaceDynamoDB runs experiment 1 with claims in DynamoDB: exactly one
// charge per payment, and the table holds one completed claim per payment.
func TestRaceDynamoDB(t *testing.T) {
	t.Parallel()
	client, table := dynamoTable(t)
	const n = 100
	res, err := runRace(t.Context(), Options{Payments: n, Seed: 1, NewStore: DynamoDBStores(client, table)})
	if err != nil {
		t.Fatal(err)
	}
	if res.ClaimFirst.Charges != n || res.ClaimFirst.Deliveries != n+n/20 {
		t.Errorf("claim first on DynamoDB: deliveries %d, charges %d; want %d, %d",
			res.ClaimFirst.Deliveries, res.ClaimFirst.Charges, n+n/20, n)
	}

	// Only the claim-first row uses the store, so the table holds its claims.
	statuses := map[string]int{}
	prefixes := map[string]bool{}
	p := dynamodb.NewScanPaginator(client, &dynamodb.ScanInput{TableName: aws.String(table)})
	for p.HasMorePages() {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range page.Items {
			status, _ := item["status"].(*types.AttributeValueMemberS)
			pk, _ := item[dynamo.DefaultKeyAttribute].(*types.AttributeValueMemberS)
			token, _ := item["token"].(*types.AttributeValueMemberN)
			if status == nil || pk == nil || token == nil {
				t.Fatalf("item without status, key or token: %v", item)
			}
			statuses[status.Value]++
			prefixes[pk.Value[:strings.LastIndexByte(pk.Value, '/')+1]] = true
			if token.Value != "1" {
				t.Errorf("claim %s has token %s, want 1: nobody took it over", pk.Value, token.Value)
			}
		}
	}
	if statuses["COMPLETED"] != n || len(statuses) != 1 {
		t.Errorf("table holds claims by status %v, want %d COMPLETED and nothing else", statuses, n)
	}
	if len(prefixes) != 1 {
		t.Errorf("claims under %d prefixes %v, want the row's one", len(prefixes), prefixes)
	}
}

// TestLeaseDynamoDB runs experiment 3 with claims in DynamoDB, whose lease
// conditions compare with the store's clock that the demo moves forward.
func TestLeaseDynamoDB(t *testing.T) {
	t.Parallel()
	client, table := dynamoTable(t)
	const n = 100
	res, err := runLease(t.Context(), Options{Payments: n, Seed: 4, NewStore: DynamoDBStores(client, table)})
	checkLease(t, res, err, n)
}

// TestRememberDynamoDB runs experiment 6 with claims in DynamoDB, where a row
// past expires_at counts as absent by the condition (moto, like DynamoDB,
// does not delete it on time).
func TestRememberDynamoDB(t *testing.T) {
	t.Parallel()
	client, table := dynamoTable(t)
	const n = 100
	res, err := runRemember(t.Context(), Options{Payments: n, Seed: 2, NewStore: DynamoDBStores(client, table)})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Short; s.Late != n/20 || s.Charges != n+n/20 || s.Double != n/20 {
		t.Errorf("claims kept 1 hour on DynamoDB: late %d, charges %d, %+v; want %d, %d, double %d", s.Late, s.Charges, s.effects, n/20, n+n/20, n/20)
	}
	if l := res.PastRetention; l.Charges != n || !l.OK() || l.Duplicates != n/20 {
		t.Errorf("claims kept past retention on DynamoDB: charges %d, %+v, duplicates %d; want %d, ok, %d", l.Charges, l.effects, l.Duplicates, n, n/20)
	}
}

// TestForgetDynamoDB runs experiment 8 with claims in DynamoDB: first_at
// survives the releases and the takeover, so the redriven payments are
// looked up, not charged.
func TestForgetDynamoDB(t *testing.T) {
	t.Parallel()
	client, table := dynamoTable(t)
	const n = 100
	res, err := runForget(t.Context(), Options{Payments: n, Seed: 3, NewStore: DynamoDBStores(client, table)})
	if err != nil {
		t.Fatal(err)
	}
	if b := res.RetryWithKey; b.Late != n/50 || b.Charges != n+n/50 || b.Double != n/50 {
		t.Errorf("retry with the forgotten key on DynamoDB: late %d, charges %d, %+v; want %d, %d, double %d", b.Late, b.Charges, b.effects, n/50, n+n/50, n/50)
	}
	if l := res.LookUp; l.Late != n/50 || l.Charges != n || !l.OK() || l.Lookups != n/50 {
		t.Errorf("look up on DynamoDB: late %d, charges %d, %+v, lookups %d; want %d, %d, ok, %d", l.Late, l.Charges, l.effects, l.Lookups, n/50, n, n/50)
	}
}

// TestLedgerDynamoDB runs experiment 7 with its ledger and its claims in
// DynamoDB: written, then completed, a crashed worker's entry is written
// twice; committed in one TransactWriteItems with the claim, once.
func TestLedgerDynamoDB(t *testing.T) {
	t.Parallel()
	client, table := dynamoTable(t)
	ledgerTable := awstest.Name("demo-ledger")
	if err := ledgerpkg.CreateTable(t.Context(), client, ledgerTable); err != nil {
		t.Fatal(err)
	}
	const n = 100
	res, err := runLedger(t.Context(), Options{
		Payments: n, Seed: 1, NewStore: DynamoDBStores(client, table),
		Ledger: &DynamoDBLedger{Client: client, Table: ledgerTable},
	})
	if err != nil {
		t.Fatal(err)
	}
	if w := res.WriteThenComplete; w.Crashed != n/50 || w.Entries != n+n/50 || w.Double != n/50 || w.BalanceError == 0 {
		t.Errorf("write, then complete on DynamoDB: %+v; want %d crashed, %d entries, double %d, balances off", w, n/50, n+n/50, n/50)
	}
	if o := res.OneTransaction; o.Crashed != n/50 || o.Entries != n || !o.OK() || o.BalanceError != 0 {
		t.Errorf("one transaction on DynamoDB: %+v; want %d crashed, %d entries, ok, balances exact", o, n/50, n)
	}
}
