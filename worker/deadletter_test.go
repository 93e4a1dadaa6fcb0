package worker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func strAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

// TestDeadLetterAttributes: a dead-lettered message carries its reason, its
// original id and first receipt time; a redriven one keeps the first ones;
// SQS's limit of ten attributes holds, the worker's own kept first.
func TestDeadLetterAttributes(t *testing.T) {
	t.Parallel()
	dl := deadLetter{
		attrs:     map[string]types.MessageAttributeValue{"Tenant": strAttr("t1"), ReasonAttribute: strAttr("old reason")},
		messageID: "m-2", firstRecv: "1764806400000", reason: "bad body",
	}
	got := dl.attributes()
	want := map[string]string{ReasonAttribute: "bad body", OriginalIDAttribute: "m-2", FirstReceivedAttribute: "2025-12-04T00:00:00Z", "Tenant": "t1"}
	if len(got) != len(want) {
		t.Errorf("attributes %v, want %v", got, want)
	}
	for k, v := range want {
		if aws.ToString(got[k].StringValue) != v {
			t.Errorf("%s = %q, want %q", k, aws.ToString(got[k].StringValue), v)
		}
	}

	// Redriven and dead-lettered again: the first id and time stay.
	dl.attrs[OriginalIDAttribute] = strAttr("m-1")
	dl.attrs[FirstReceivedAttribute] = strAttr("2025-12-01T00:00:00Z")
	got = dl.attributes()
	if aws.ToString(got[OriginalIDAttribute].StringValue) != "m-1" || aws.ToString(got[FirstReceivedAttribute].StringValue) != "2025-12-01T00:00:00Z" {
		t.Errorf("redriven: %v", got)
	}

	// Ten attributes of its own: the worker's three are kept, seven others.
	dl.attrs = map[string]types.MessageAttributeValue{}
	for i := range 10 {
		dl.attrs[fmt.Sprintf("a%d", i)] = strAttr("v")
	}
	got = dl.attributes()
	if len(got) != maxMessageAttributes {
		t.Fatalf("%d attributes, want %d", len(got), maxMessageAttributes)
	}
	for _, k := range []string{ReasonAttribute, OriginalIDAttribute, FirstReceivedAttribute, "a0", "a6"} {
		if _, ok := got[k]; !ok {
			t.Errorf("%s dropped: %v", k, got)
		}
	}
	if _, ok := got["a7"]; ok {
		t.Errorf("a7 kept over the limit")
	}
	if dl.reason = strings.Repeat("x", 2000); len(aws.ToString(dl.attributes()[ReasonAttribute].StringValue)) > 1024 {
		t.Error("reason not truncated")
	}
}
