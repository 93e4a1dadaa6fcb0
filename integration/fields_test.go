package integration

import (
	"fmt"
	"testing"
	"time"
)

// TestPaymentWithExtraField: a producer adds a field to its payments; the
// worker ignores it (logging the name once) and charges each payment once,
// dead-lettering none, and the same payment sent without the field is a
// duplicate, not a reused key.
func TestPaymentWithExtraField(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ps := payments("extrafield", 3)
	for _, p := range ps {
		e.send(fmt.Sprintf(`{"payment_id":%q,"amount":%d,"currency":%q,"note":"gift"}`, p.PaymentID, p.Amount, p.Currency))
	}
	e.sendPayments(ps[:1]) // the same payment, without the field
	w := e.start("w1", workerOptions{})
	e.waitDrained(time.Minute)
	e.assertNoDeadLetters()
	e.assertChargedOnce(ps)
	if n := w.logCount("field the decoder ignores"); n != 1 {
		t.Errorf("the unknown field was logged %d times, want once", n)
	}
	if code := w.stop(t, 30*time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
}
