package redrive

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func TestSizedBatch(t *testing.T) {
	t.Parallel()
	msgs := func(sizes ...int) []types.Message {
		ms := make([]types.Message, len(sizes))
		for i, n := range sizes {
			ms[i] = types.Message{Body: aws.String(strings.Repeat("x", n))} // no id: no attribute added
		}
		return ms
	}
	for _, tc := range []struct {
		name  string
		sizes []int
		max   int
		want  int
	}{
		{"ten small", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 100, 10},
		{"up to the bytes", []int{40, 40, 40}, 100, 2},
		{"exactly the bytes", []int{50, 50, 1}, 100, 2},
		{"one too large goes alone", []int{500, 1}, 100, 1},
	} {
		if got := sizedBatch(msgs(tc.sizes...), tc.max, ""); got != tc.want {
			t.Errorf("%s: sizedBatch = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestOptionsSelect(t *testing.T) {
	t.Parallel()
	o := Options{ExcludeReasons: []string{"reconcile", "key reused"}}
	for reason, want := range map[string]bool{"provider unavailable": true, "outcome unknown: reconcile": false, "key reused with another request": false, NoReason: true} {
		if got := o.selects(reason); got != want {
			t.Errorf("exclude: selects(%q) = %v, want %v", reason, got, want)
		}
	}
	o = Options{Reasons: []string{NoReason}}
	if !o.selects(NoReason) || o.selects("provider unavailable") {
		t.Error("-reason none selects the wrong messages")
	}
}
