package sqsworker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/claimfirst/claimfirst/origin"
	"github.com/claimfirst/claimfirst/worker"
)

func strAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

const testSecret origin.Secret = "0123456789abcdef-test"

// TestDeadLetterAttributes: a dead-lettered message carries its reason, its
// original id, signed, and first receipt time; a redriven one keeps the
// first ones when their MAC verifies and gets its own id and time when it
// does not (a producer's forgery); without a secret no original id is
// written (nothing would believe it); every attribute the message came
// with survives, and the worker's own take only the room left by SQS's
// limits (ten attributes, 1 MiB with the body).
func TestDeadLetterAttributes(t *testing.T) {
	t.Parallel()
	dl := deadLetter{
		body:      aws.String("{}"),
		attrs:     map[string]types.MessageAttributeValue{"Tenant": strAttr("t1"), worker.ReasonAttribute: strAttr("old reason")},
		messageID: "m-2", firstRecv: "1764806400000", reason: "bad body", secret: testSecret,
	}
	got, omitted := dl.attributes()
	want := map[string]string{worker.ReasonAttribute: "bad body", worker.FirstReceivedAttribute: "2025-12-04T00:00:00Z", "Tenant": "t1",
		worker.OriginalIDAttribute: origin.Sign(testSecret, "m-2", "2025-12-04T00:00:00Z", "{}")}
	if len(got) != len(want) || len(omitted) != 0 {
		t.Errorf("attributes %v (omitted %v), want %v", got, omitted, want)
	}
	for k, v := range want {
		if aws.ToString(got[k].StringValue) != v {
			t.Errorf("%s = %q, want %q", k, aws.ToString(got[k].StringValue), v)
		}
	}

	// Redriven and dead-lettered again: the first id and time stay.
	signed := origin.Sign(testSecret, "m-1", "2025-12-01T00:00:00Z", "{}")
	dl.attrs[worker.OriginalIDAttribute] = strAttr(signed)
	dl.attrs[worker.FirstReceivedAttribute] = strAttr("2025-12-01T00:00:00Z")
	got, _ = dl.attributes()
	if aws.ToString(got[worker.OriginalIDAttribute].StringValue) != signed || aws.ToString(got[worker.FirstReceivedAttribute].StringValue) != "2025-12-01T00:00:00Z" {
		t.Errorf("redriven: %v", got)
	}

	// A producer's OriginalMessageId and FirstReceivedAt: replaced by the
	// message's own, signed.
	dl.attrs[worker.OriginalIDAttribute] = strAttr("victim")
	got, _ = dl.attributes()
	if v := aws.ToString(got[worker.OriginalIDAttribute].StringValue); v != want[worker.OriginalIDAttribute] || aws.ToString(got[worker.FirstReceivedAttribute].StringValue) != want[worker.FirstReceivedAttribute] {
		t.Errorf("forged: %s = %q, %s = %q; want the message's own, signed", worker.OriginalIDAttribute, v, worker.FirstReceivedAttribute, aws.ToString(got[worker.FirstReceivedAttribute].StringValue))
	}

	// No secret: no original id (a producer's dropped), the rest as before.
	dl.secret = ""
	got, omitted = dl.attributes()
	if _, ok := got[worker.OriginalIDAttribute]; ok || len(omitted) != 0 || aws.ToString(got[worker.ReasonAttribute].StringValue) != "bad body" {
		t.Errorf("no secret: %v (omitted %v); want no %s", got, omitted, worker.OriginalIDAttribute)
	}
	dl.secret = testSecret

	for _, tc := range []struct {
		own      int
		wantOurs []string
	}{
		{7, []string{worker.OriginalIDAttribute, worker.ReasonAttribute, worker.FirstReceivedAttribute}},
		{8, []string{worker.OriginalIDAttribute, worker.ReasonAttribute}},
		{9, []string{worker.OriginalIDAttribute}},
		{10, nil},
	} {
		dl.attrs = map[string]types.MessageAttributeValue{}
		for i := range tc.own {
			dl.attrs[fmt.Sprintf("a%d", i)] = strAttr("v")
		}
		got, omitted = dl.attributes()
		if len(got) != tc.own+len(tc.wantOurs) || len(omitted) != 3-len(tc.wantOurs) {
			t.Errorf("%d of its own: %d attributes, omitted %v; want all %d and %v of the worker's", tc.own, len(got), omitted, tc.own, tc.wantOurs)
		}
		for i := range tc.own {
			if _, ok := got[fmt.Sprintf("a%d", i)]; !ok {
				t.Errorf("%d of its own: a%d dropped", tc.own, i)
			}
		}
		for _, k := range tc.wantOurs {
			if _, ok := got[k]; !ok {
				t.Errorf("%d of its own: %s missing with room for it", tc.own, k)
			}
		}
	}

	// A body near SQS's 1 MiB: the worker's attributes go before the send would fail.
	dl.attrs = map[string]types.MessageAttributeValue{"Tenant": strAttr("t1")}
	dl.body = aws.String(strings.Repeat("b", maxMessageBytes-100))
	dl.reason = strings.Repeat("x", 2000)
	got, omitted = dl.attributes()
	size := len(*dl.body)
	for k, v := range got {
		size += attributeBytes(k, v)
	}
	if size > maxMessageBytes || len(omitted) == 0 || got["Tenant"].StringValue == nil {
		t.Errorf("near 1 MiB: %d bytes with %d attributes (omitted %v); want at most %d, Tenant kept", size, len(got), omitted, maxMessageBytes)
	}
	dl.body = aws.String("{}")
	if got, _ = dl.attributes(); len(aws.ToString(got[worker.ReasonAttribute].StringValue)) > 1024 {
		t.Error("reason not truncated")
	}
}
