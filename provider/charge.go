package provider

import "time"

// The charge lookup: GET {BaseURL}/v1/charges?payment_id=ID lists the
// charges of a payment as a ChargeList, so that a caller whose key the
// provider may have forgotten can find out whether it was charged.
const (
	// ChargesPath is the path of both POST (charge) and GET (lookup).
	ChargesPath = "/v1/charges"
	// PaymentIDParam is the lookup's query parameter.
	PaymentIDParam = "payment_id"
)

// ChargeRecord is one charge as the lookup lists it.
type ChargeRecord struct {
	// ID is the charge id, as the charge's answer carried it.
	ID string `json:"id"`
	// PaymentID is the payment_id of the charge request.
	PaymentID string `json:"payment_id"`
	// Amount is in minor units.
	Amount int64 `json:"amount"`
	// Currency is the ISO 4217 code.
	Currency string `json:"currency"`
	// Status is StatusSucceeded.
	Status string `json:"status"`
	// Created is when the charge was made (RFC 3339 in JSON).
	Created time.Time `json:"created"`
}

// ChargeList is the lookup's answer: the payment's charges, oldest first.
// Data is empty, not null, when the payment was never charged.
type ChargeList struct {
	Data []ChargeRecord `json:"data"`
}
