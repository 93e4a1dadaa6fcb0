package main

import (
	"context"
	"log/slog"

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
	ap.setStore(store)
	if ap.pg != nil { // the entries go in the claims' database: <LEDGER_TABLE>_entries and _accounts
		ap.handler = ledger.SQLHandler{Tables: *a.ledger.table}
	}
	log.Info("handling ledger entries", slog.String("ledger_table", *a.ledger.table))
	return ap, nil
}
