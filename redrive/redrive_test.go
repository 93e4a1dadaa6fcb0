package redrive

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/claimfirst/claimfirst/origin"
)

func attr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

const testSecret origin.Secret = "0123456789abcdef-test"

// fromSource marks m as dead-lettered by SQS from the source queue.
func fromSource(m types.Message) types.Message {
	m.Attributes = map[string]string{string(types.MessageSystemAttributeNameDeadLetterQueueSourceArn): "arn:aws:sqs:r:1:payments"}
	return m
}

// TestAttributes: the moved copy drops the reason; keeps a signed original
// id; drops an unsigned one (a producer's), and gives a message SQS
// dead-lettered its id, signed, when there is room and a secret.
func TestAttributes(t *testing.T) {
	t.Parallel()
	many := map[string]types.MessageAttributeValue{}
	for i := range 10 {
		many["a"+strconv.Itoa(i)] = attr("x")
	}
	signed := origin.Sign(testSecret, "first-id", "", "body")
	tests := []struct {
		name   string
		m      types.Message
		secret origin.Secret
		want   map[string]string // attribute -> value; "" for absent
		class  kind
	}{
		{"worker dead-lettered: reason dropped, original id kept",
			types.Message{MessageId: aws.String("dlq-id"), Body: aws.String("body"), MessageAttributes: map[string]types.MessageAttributeValue{
				ReasonAttribute: attr("bad"), OriginalIDAttribute: attr(signed), "Tenant": attr("t1")}},
			testSecret, map[string]string{ReasonAttribute: "", OriginalIDAttribute: signed, "Tenant": "t1"}, movable},
		{"sent directly with a made-up original id: dropped, left",
			types.Message{MessageId: aws.String("dlq-id"), Body: aws.String("body"), MessageAttributes: map[string]types.MessageAttributeValue{
				OriginalIDAttribute: attr("victim"), FirstReceivedAttribute: attr("t")}},
			testSecret, map[string]string{OriginalIDAttribute: "", FirstReceivedAttribute: ""}, unverified},
		{"signed, no secret given: left",
			types.Message{MessageId: aws.String("dlq-id"), Body: aws.String("body"), MessageAttributes: map[string]types.MessageAttributeValue{
				OriginalIDAttribute: attr(signed)}},
			"", map[string]string{OriginalIDAttribute: ""}, unverified},
		{"sent directly without one: unkeyed",
			types.Message{MessageId: aws.String("dlq-id"), Body: aws.String("body")},
			testSecret, map[string]string{OriginalIDAttribute: ""}, unkeyed},
		{"SQS dead-lettered: its id becomes the original id, signed",
			fromSource(types.Message{MessageId: aws.String("kept-id"), Body: aws.String("body")}),
			testSecret, map[string]string{OriginalIDAttribute: origin.Sign(testSecret, "kept-id", "", "body")}, movable},
		{"SQS dead-lettered, no secret: unkeyed",
			fromSource(types.Message{MessageId: aws.String("kept-id"), Body: aws.String("body")}),
			"", map[string]string{OriginalIDAttribute: ""}, unkeyed},
		{"SQS dead-lettered, ten attributes of its own: no room for the id",
			fromSource(types.Message{MessageId: aws.String("id"), MessageAttributes: many}),
			testSecret, map[string]string{OriginalIDAttribute: "", "a9": "x"}, unkeyed},
	}
	for _, tc := range tests {
		got := Attributes(tc.m, tc.secret)
		for k, want := range tc.want {
			v, ok := got[k]
			if want == "" && ok || want != "" && aws.ToString(v.StringValue) != want {
				t.Errorf("%s: %s = %v, want %q", tc.name, k, aws.ToString(v.StringValue), want)
			}
		}
		if len(got) > maxAttributes {
			t.Errorf("%s: %d attributes, more than SQS allows", tc.name, len(got))
		}
		if k := (Options{Secret: tc.secret}).classify(tc.m); k != tc.class {
			t.Errorf("%s: classified %d, want %d", tc.name, k, tc.class)
		}
	}
}

func TestReasonsMostFrequentFirst(t *testing.T) {
	t.Parallel()
	c := Counts{ByReason: map[string]int{"b": 2, "a": 2, NoReason: 1, "c": 5}}
	if got := fmt.Sprint(c.Reasons()); got != "[c a b "+NoReason+"]" {
		t.Errorf("Reasons() = %s", got)
	}
}

func respErr(status int, err error) error {
	return &smithy.OperationError{ServiceID: "SQS", OperationName: "StartMessageMoveTask", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: err},
	}}
}

func TestUnsupported(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"HTML 500 (the emulator)", respErr(500, &smithy.DeserializationError{Err: errors.New("invalid character '<'")}), true},
		{"501", respErr(501, errors.New("x")), true},
		{"unknown operation code", respErr(400, &smithy.GenericAPIError{Code: "UnknownOperationException"}), true},
		{"SQS's own 500", respErr(500, &smithy.GenericAPIError{Code: "InternalError"}), false},
		{"access denied", respErr(403, &smithy.GenericAPIError{Code: "AccessDenied"}), false},
		{"network", errors.New("connection refused"), false},
	}
	for _, tc := range tests {
		if got := unsupported(tc.err); got != tc.want {
			t.Errorf("%s: unsupported = %v, want %v", tc.name, got, tc.want)
		}
	}
}
