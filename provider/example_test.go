package provider_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/provider/fakeprovider"
)

// A charge whose answer is lost is asked for again with the same key: the
// provider replays the first result instead of charging twice.
func ExampleClient_Charge() {
	// A provider whose first answer for every key arrives too late.
	fake := fakeprovider.New(fakeprovider.Config{ChargeThenTimeout: 1, TimeoutDelay: time.Hour})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	defer fake.Close()

	c, err := provider.NewClient(provider.Config{BaseURL: srv.URL, Timeout: 200 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.CloseIdleConnections()
	ctx := context.Background()

	p := provider.Payment{PaymentID: "pay_123", Amount: 1999, Currency: "EUR"}
	ch, err := c.Charge(ctx, p.PaymentID, p)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ch.Status, "after", ch.Attempts, "attempts, replayed:", ch.Replayed)

	_, err = c.Charge(ctx, "pay_124", provider.Payment{PaymentID: "decline_124", Amount: 500, Currency: "EUR"})
	var pe *provider.Error
	if errors.As(err, &pe) {
		fmt.Println(pe.Kind, "retryable:", pe.Retryable())
	}

	st := fake.Stats()
	fmt.Println("calls:", st.Calls, "charges:", st.Charges, "declines:", st.Declines)
	// Output:
	// succeeded after 2 attempts, replayed: true
	// declined retryable: false
	// calls: 4 charges: 1 declines: 1
}
