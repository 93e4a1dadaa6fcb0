package dynamo_test

import (
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

type (
	typesAV = types.AttributeValue
	typesS  = types.AttributeValueMemberS
	typesN  = types.AttributeValueMemberN
)

func avType(v types.AttributeValue) string {
	switch v.(type) {
	case *types.AttributeValueMemberS:
		return "S"
	case *types.AttributeValueMemberN:
		return "N"
	default:
		return "other"
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
