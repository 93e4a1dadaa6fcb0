package keyexpr_test

import (
	"fmt"

	"github.com/claimfirst/claimfirst/keyexpr"
)

// Keys from a path in the payload, with the payload's amount and currency as
// its fingerprint; the order arrives as a JSON string inside the event, as
// Powertools' powertools_json reads it.
func ExampleExpr_Extract() {
	e, err := keyexpr.New(keyexpr.Config{
		Key:         "powertools_json(body).order_id",
		Fingerprint: "powertools_json(body).[amount, currency]",
	})
	if err != nil {
		panic(err)
	}
	x, err := e.Extract([]byte(`{"body": "{\"order_id\": \"ord_42\", \"amount\": 1999, \"currency\": \"EUR\"}"}`))
	fmt.Println(x.Key, x.Fingerprint != "", err)

	_, err = e.Extract([]byte(`{"body": "{\"amount\": 1999}"}`))
	fmt.Println(err)
	// Output:
	// ord_42 true <nil>
	// keyexpr: key expression "powertools_json(body).order_id" found no key in the payload (found null)
}
