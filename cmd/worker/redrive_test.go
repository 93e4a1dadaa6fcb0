package main

import (
	"slices"
	"testing"

	"github.com/claimfirst/claimfirst/redrive"
)

// TestReasonCategories: the dry run groups reasons by what comes before the
// first ": ", so every JSON parse error is one row, not one row each.
func TestReasonCategories(t *testing.T) {
	t.Parallel()
	got := reasonCategories(map[string]int{
		"invalid payment message: payment: invalid character 'x' looking for beginning of value": 2,
		"invalid payment message: payment: unexpected end of JSON input":                         1,
		"invalid payment message: payment: amount must be a JSON integer":                        1,
		"provider unavailable":                            3,
		"payment id reused with a different payment: 422": 1,
		redrive.NoReason:                                  1,
	})
	want := []reasonCategory{
		{name: "invalid payment message", count: 4, kinds: 3, example: "invalid payment message: payment: invalid character 'x' looking for beginning of value"},
		{name: "provider unavailable", count: 3, kinds: 1, example: "provider unavailable"},
		{name: redrive.NoReason, count: 1, kinds: 1, example: redrive.NoReason},
		{name: "payment id reused with a different payment", count: 1, kinds: 1, example: "payment id reused with a different payment: 422"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}
