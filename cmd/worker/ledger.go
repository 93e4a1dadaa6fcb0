package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/claimfirst/claimfirst/ledger"
)

// The handlers `worker run` and the Lambda mode can run (HANDLER).
const (
	handlerPayment = "payment" // charge payments through the provider (the default)
	handlerLedger  = "ledger"  // apply ledger entries to LEDGER_TABLE, committed with the claims
)

// ledgerSettings select the reference ledger handler instead of payments.
type ledgerSettings struct {
	handler, table *string
}

func defineLedger(s *settings) ledgerSettings {
	return ledgerSettings{
		handler: s.String("handler", "HANDLER", handlerPayment, "what to do with each message: payment (charge through the provider) or ledger (append an entry to LEDGER_TABLE, committed with the claim)"),
		table:   s.String("ledger-table", "LEDGER_TABLE", "", "ledger table for HANDLER=ledger: DynamoDB's, or with STORE=postgres the prefix of <name>_entries and <name>_accounts"),
	}
}

// ledger reports whether the ledger handler is selected, or a usage error
// for an unknown handler.
func (l ledgerSettings) ledger() (bool, error) {
	switch *l.handler {
	case handlerPayment, "":
		return false, nil
	case handlerLedger:
		return true, require(*l.table, "ledger-table", "LEDGER_TABLE")
	default:
		return false, usagef("HANDLER (-handler) %q: want %s or %s", *l.handler, handlerPayment, handlerLedger)
	}
}

// buildLedger builds the app for HANDLER=ledger: the ledger handler needs
// no provider; its writes go with the claims' completions, so the claim
// table and the ledger table must be in one account and region.
func (a *appSettings) buildLedger(ctx context.Context, io stdio) (*app, error) {
	log, err := a.logger(io)
	if err != nil {
		return nil, err
	}
	cfg, tr, store, err := a.claimStore(ctx, io)
	if err != nil {
		return nil, err
	}
	ap := &app{log: log, aws: cfg, tracing: tr, handler: ledger.Handler{Table: *a.ledger.table}, decoder: ledger.Decoder{}}
	if ap.originID, err = a.origin.secret(ctx, cfg); err != nil {
		return nil, err
	}
	ap.setStore(store)
	if ap.pg != nil { // the entries go in the claims' database: <LEDGER_TABLE>_entries and _accounts
		ap.handler = ledger.SQLHandler{Tables: *a.ledger.table}
	} else if err := checkLedgerTable(ctx, dynamodb.NewFromConfig(cfg), *a.ledger.table); err != nil {
		return nil, err
	}
	log.Info("handling ledger entries", slog.String("ledger_table", *a.ledger.table))
	return ap, nil
}

// checkLedgerTable describes the ledger table once at start and refuses
// (exit 2) one that is absent or not keyed by a string partition key
// alone, instead of failing at the first message.
func checkLedgerTable(ctx context.Context, api *dynamodb.Client, name string) error {
	out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	var nf *types.ResourceNotFoundException
	switch {
	case errors.As(err, &nf):
		return usagef("LEDGER_TABLE (-ledger-table): ledger table %q does not exist (create it with worker setup -ledger-table)", name)
	case err != nil:
		return usagef("LEDGER_TABLE (-ledger-table): ledger table %q: cannot describe it: %v", name, err)
	}
	ks := out.Table.KeySchema
	if len(ks) != 1 || aws.ToString(ks[0].AttributeName) != ledger.DefaultKeyAttribute || ks[0].KeyType != types.KeyTypeHash {
		return usagef("LEDGER_TABLE (-ledger-table): ledger table %q is not keyed by a %s partition key alone", name, ledger.DefaultKeyAttribute)
	}
	return nil
}
