package envelope_test

import (
	"fmt"

	"github.com/claimfirst/claimfirst/envelope"
)

func ExampleUnwrap() {
	m := envelope.Unwrap(snsBody)
	fmt.Println(m.Path(), m.Attributes["Idempotency-Key"])
	fmt.Println(m.Body)
	// Output:
	// sns k-1
	// {"payment_id":"pay_123","amount":1999,"currency":"EUR"}
}
