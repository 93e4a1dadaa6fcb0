package provider

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// ErrNoLookup means the provider cannot list a payment's charges (it
// answered 404 to the lookup): a retry past the provider's key lifetime
// cannot be reconciled automatically.
var ErrNoLookup = errors.New("provider: the provider cannot look charges up")

// Lookup lists the charges the provider made for paymentID, oldest first,
// to reconcile a payment whose outcome is unknown and whose key the
// provider may have forgotten. A provider that cannot look up (404) fails
// with an *Error wrapping ErrNoLookup (errors.Is works); other failures are
// *Errors of the same kinds and retries as Charge's.
func (c *Client) Lookup(ctx context.Context, paymentID string) ([]ChargeRecord, error) {
	if strings.TrimSpace(paymentID) == "" {
		return nil, &Error{Kind: KindBadRequest, Reason: "lookup without a payment id"}
	}
	u := c.url + "?" + PaymentIDParam + "=" + url.QueryEscape(paymentID)
	var list ChargeList
	_, e := c.retry(ctx, "lookup", func(ctx context.Context) (*Error, string) {
		var e *Error
		var retryAfter string
		list, e, retryAfter = c.lookupAttempt(ctx, u)
		return e, retryAfter
	})
	if e != nil {
		return nil, e
	}
	return list.Data, nil
}

func (c *Client) lookupAttempt(ctx context.Context, u string) (ChargeList, *Error, string) {
	a, e := c.send(ctx, http.MethodGet, u, nil, nil)
	if e != nil {
		return ChargeList{}, e, ""
	}
	if a.readErr != nil {
		return ChargeList{}, a.readErr, ""
	}
	switch {
	case a.status == http.StatusNotFound:
		return ChargeList{}, &Error{Kind: KindDependency, StatusCode: a.status, Reason: "lookup not supported", Err: ErrNoLookup}, ""
	case a.status >= 200 && a.status < 300:
		var list ChargeList
		if err := json.Unmarshal(a.body, &list); err != nil {
			return ChargeList{}, &Error{Kind: KindUnknown, StatusCode: a.status, Reason: "undecodable lookup answer", Err: err}, ""
		}
		return list, nil, ""
	}
	_, e = classify(a.status, "", a.body)
	if e.Kind == KindDeclined || e.Kind == KindKeyMismatch {
		e.Kind = KindDependency // a lookup is never declined; the provider misbehaves
	}
	return ChargeList{}, e, a.header.Get("Retry-After")
}
