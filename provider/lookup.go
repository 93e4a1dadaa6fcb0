package provider

import (
	"context"
	"encoding/json"
	"errors"
	"io"
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
	actx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, u, nil)
	if err != nil { // unreachable: the URL was validated
		return ChargeList{}, &Error{Kind: KindBadRequest, Err: err}, ""
	}
	req.Header["Accept"] = c.jsonType
	req.Header["User-Agent"] = c.userAgent
	if c.auth != nil {
		req.Header["Authorization"] = c.auth
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return ChargeList{}, c.transportError(ctx, actx, 0, err), ""
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return ChargeList{}, c.transportError(ctx, actx, resp.StatusCode, err), ""
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return ChargeList{}, &Error{Kind: KindDependency, StatusCode: resp.StatusCode, Reason: "lookup not supported", Err: ErrNoLookup}, ""
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		var list ChargeList
		if err := json.Unmarshal(data, &list); err != nil {
			return ChargeList{}, &Error{Kind: KindUnknown, StatusCode: resp.StatusCode, Reason: "undecodable lookup answer", Err: err}, ""
		}
		return list, nil, ""
	}
	_, e := classify(resp.StatusCode, "", data)
	if e.Kind == KindDeclined || e.Kind == KindKeyMismatch {
		e.Kind = KindDependency // a lookup is never declined; the provider misbehaves
	}
	return ChargeList{}, e, resp.Header.Get("Retry-After")
}
