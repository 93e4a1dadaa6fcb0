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
)

func attr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

func TestAttributes(t *testing.T) {
	t.Parallel()
	many := map[string]types.MessageAttributeValue{}
	for i := range 10 {
		many["a"+strconv.Itoa(i)] = attr("x")
	}
	tests := []struct {
		name string
		m    types.Message
		want map[string]string // attribute -> value; "" for absent
	}{
		{"worker dead-lettered: reason dropped, original id kept",
			types.Message{MessageId: aws.String("dlq-id"), MessageAttributes: map[string]types.MessageAttributeValue{
				ReasonAttribute: attr("bad"), OriginalIDAttribute: attr("first-id"), "Tenant": attr("t1")}},
			map[string]string{ReasonAttribute: "", OriginalIDAttribute: "first-id", "Tenant": "t1"}},
		{"SQS dead-lettered: its id becomes the original id",
			types.Message{MessageId: aws.String("kept-id")},
			map[string]string{OriginalIDAttribute: "kept-id"}},
		{"ten attributes of its own: no room for the id",
			types.Message{MessageId: aws.String("id"), MessageAttributes: many},
			map[string]string{OriginalIDAttribute: "", "a9": "x"}},
	}
	for _, tc := range tests {
		got := Attributes(tc.m)
		for k, want := range tc.want {
			v, ok := got[k]
			if want == "" && ok || want != "" && aws.ToString(v.StringValue) != want {
				t.Errorf("%s: %s = %v, want %q", tc.name, k, aws.ToString(v.StringValue), want)
			}
		}
		if len(got) > maxAttributes {
			t.Errorf("%s: %d attributes, more than SQS allows", tc.name, len(got))
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
