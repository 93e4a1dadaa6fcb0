package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ProviderError is a provider's refusal: an outage (503), credentials it
// no longer accepts (401), or a request with the same key still in flight
// (409). Nothing was charged.
type ProviderError struct {
	// Status is the HTTP status the provider answered.
	Status int
}

// Error implements error.
func (e *ProviderError) Error() string { return fmt.Sprintf("provider answered %d", e.Status) }

// ErrTimeout is an ambiguous provider timeout: the charge may have happened.
var ErrTimeout = errors.New("sim: provider timeout (outcome unknown)")

// ProviderFault is what the provider does to one charge.
type ProviderFault int

// The provider faults.
const (
	// ChargeOK answers normally.
	ChargeOK ProviderFault = iota
	// ChargeTimeout charges and loses the answer: ErrTimeout.
	ChargeTimeout
	// ChargeRefused answers 503 before charging.
	ChargeRefused
)

// Provider is a payment provider that honours idempotency keys for
// KeyLifetime: a charge with a key it remembers returns the first charge's
// id and moves no money. It counts the money moved per payment, the oracle
// the invariants read. Safe for concurrent use.
type Provider struct {
	// KeyLifetime is how long a key is remembered. Defaults to 24h.
	KeyLifetime time.Duration
	// Decide returns the fault of one charge from its key and its attempt
	// number for that key. Defaults to none.
	Decide func(key string, attempt int) ProviderFault
	// Outage returns the status the provider answers every call with at
	// now (503 or 401), or 0. Defaults to never.
	Outage func(now time.Time) int
	// Latency returns how long a charge takes, from its key and attempt.
	// Defaults to 200ms.
	Latency func(key string, attempt int) time.Duration
	// Injected counts the faults injected, by kind; may be nil.
	Injected func(kind string)

	mu       sync.Mutex
	keys     map[string]keyState
	attempts map[string]int
	moved    map[string][]Charge // by payment
}

type keyState struct {
	id       string
	at       time.Time
	inFlight bool
}

// Charge is money moved once.
type Charge struct {
	// ID is the charge's id.
	ID string
	// Key is the idempotency key it was made with.
	Key string
	// Payment and Amount say what was paid.
	Payment string
	Amount  int64
	// At is when it happened.
	At time.Time
}

func (p *Provider) count(kind string) {
	if p.Injected != nil {
		p.Injected(kind)
	}
}

// Charge moves amount for payment under key, once per key within the key's
// lifetime, and returns the charge id.
func (p *Provider) Charge(ctx context.Context, key, payment string, amount int64) (string, error) {
	now := time.Now()
	if p.Outage != nil {
		if st := p.Outage(now); st != 0 {
			p.count(fmt.Sprintf("provider_%d", st))
			return "", &ProviderError{Status: st}
		}
	}
	p.mu.Lock()
	if p.keys == nil {
		p.keys, p.attempts, p.moved = map[string]keyState{}, map[string]int{}, map[string][]Charge{}
	}
	p.attempts[key]++
	n := p.attempts[key]
	var fault ProviderFault
	if p.Decide != nil {
		fault = p.Decide(key, n)
	}
	if fault == ChargeRefused {
		p.mu.Unlock()
		p.count("provider_503")
		return "", &ProviderError{Status: 503}
	}
	lifetime := p.KeyLifetime
	if lifetime == 0 {
		lifetime = 24 * time.Hour
	}
	k, seen := p.keys[key]
	switch {
	case seen && k.inFlight:
		p.mu.Unlock()
		return "", &ProviderError{Status: 409}
	case seen && now.Sub(k.at) < lifetime:
		p.mu.Unlock()
		if fault == ChargeTimeout {
			p.count("provider_timeout")
			return "", ErrTimeout
		}
		return k.id, nil
	}
	id := fmt.Sprintf("ch_%s_%d", key, n)
	p.keys[key] = keyState{id: id, at: now, inFlight: true}
	p.mu.Unlock()

	lat := 200 * time.Millisecond
	if p.Latency != nil {
		lat = p.Latency(key, n)
	}
	time.Sleep(lat) // the charge happens whatever the caller's context does

	p.mu.Lock()
	p.keys[key] = keyState{id: id, at: now}
	p.moved[payment] = append(p.moved[payment], Charge{ID: id, Key: key, Payment: payment, Amount: amount, At: time.Now()})
	p.mu.Unlock()
	if fault == ChargeTimeout || ctx.Err() != nil {
		if fault == ChargeTimeout {
			p.count("provider_timeout")
		}
		return "", ErrTimeout
	}
	return id, nil
}

// Moved returns the charges made for payment.
func (p *Provider) Moved(payment string) []Charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Charge(nil), p.moved[payment]...)
}
