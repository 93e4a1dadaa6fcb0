// Package canned is an in-process endpoint that answers the SQS and
// DynamoDB requests of the claim protocol at once from a canned script:
// every receive brings up to ten new messages until a set number has been
// handed out, every write succeeds, and the start checks (the queue's
// attributes, the claim table's description and TTL) find what they want. It exists to measure what the client
// side costs (the SDK, the worker) without an emulator's own time. It is
// a cost benchmark's endpoint, never a test of correctness: it checks
// nothing.
package canned

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/claimfirst/claimfirst/claimstore/dynamo"
)

// Endpoint is the canned endpoint, an http.Handler.
type Endpoint struct {
	mu       sync.Mutex
	left     int // messages still to hand out
	next     int
	requests atomic.Int64
}

// New returns an endpoint that hands out messages messages in all.
func New(messages int) *Endpoint { return &Endpoint{left: messages} }

// Requests returns how many requests it answered.
func (e *Endpoint) Requests() int64 { return e.requests.Load() }

// ServeHTTP answers one request by its X-Amz-Target.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.requests.Add(1)
	target := r.Header.Get("X-Amz-Target")
	body, _ := io.ReadAll(r.Body)
	switch {
	case strings.HasPrefix(target, "DynamoDB_20120810."):
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		switch strings.TrimPrefix(target, "DynamoDB_20120810.") {
		case "DescribeTable": // the store's start check: a table keyed and expiring as the store's defaults want
			writeJSON(w, map[string]any{"Table": map[string]any{
				"TableName": tableName(body), "TableStatus": "ACTIVE",
				"KeySchema":            []map[string]string{{"AttributeName": dynamo.DefaultKeyAttribute, "KeyType": "HASH"}},
				"AttributeDefinitions": []map[string]string{{"AttributeName": dynamo.DefaultKeyAttribute, "AttributeType": "S"}},
			}})
		case "DescribeTimeToLive":
			writeJSON(w, map[string]any{"TimeToLiveDescription": map[string]string{
				"AttributeName": dynamo.DefaultTTLAttribute, "TimeToLiveStatus": "ENABLED",
			}})
		default: // PutItem, UpdateItem: every write succeeds
			_, _ = io.WriteString(w, "{}")
		}
		return
	case strings.HasPrefix(target, "AmazonSQS."):
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	default:
		http.Error(w, "unknown target "+target, http.StatusBadRequest)
		return
	}
	switch strings.TrimPrefix(target, "AmazonSQS.") {
	case "ReceiveMessage":
		var in struct{ MaxNumberOfMessages int }
		_ = json.Unmarshal(body, &in)
		writeJSON(w, map[string]any{"Messages": e.take(max(1, min(in.MaxNumberOfMessages, 10)))})
	case "DeleteMessageBatch":
		var in struct {
			Entries []struct {
				ID string `json:"Id"`
			}
		}
		_ = json.Unmarshal(body, &in)
		ok := make([]map[string]string, len(in.Entries))
		for i, en := range in.Entries {
			ok[i] = map[string]string{"Id": en.ID}
		}
		writeJSON(w, map[string]any{"Successful": ok, "Failed": []any{}})
	case "GetQueueAttributes":
		writeJSON(w, map[string]any{"Attributes": map[string]string{
			"VisibilityTimeout": "30", "MessageRetentionPeriod": "345600", "QueueArn": "arn:aws:sqs:us-east-1:123456789012:canned",
		}})
	default: // ChangeMessageVisibility, DeleteMessage, SendMessage...
		_, _ = io.WriteString(w, "{}")
	}
}

type message struct {
	MessageID     string            `json:"MessageId"`
	ReceiptHandle string            `json:"ReceiptHandle"`
	MD5OfBody     string            `json:"MD5OfBody"`
	Body          string            `json:"Body"`
	Attributes    map[string]string `json:"Attributes"`
}

func (e *Endpoint) take(n int) []message {
	e.mu.Lock()
	n = min(n, e.left)
	e.left -= n
	first := e.next
	e.next += n
	e.mu.Unlock()
	msgs := make([]message, n)
	for i := range msgs {
		id := first + i
		body := fmt.Sprintf(`{"payment_id":"canned_%d","amount":100,"currency":"EUR"}`, id)
		sum := md5.Sum([]byte(body))
		msgs[i] = message{
			MessageID: fmt.Sprintf("m-%d", id), ReceiptHandle: fmt.Sprintf("r-%d", id),
			MD5OfBody: hex.EncodeToString(sum[:]), Body: body,
			Attributes: map[string]string{"ApproximateReceiveCount": "1", "ApproximateFirstReceiveTimestamp": "1764806400000"},
		}
	}
	return msgs
}

// tableName is the TableName of a DynamoDB request body.
func tableName(body []byte) string {
	var in struct{ TableName string }
	_ = json.Unmarshal(body, &in)
	return in.TableName
}

func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	_, _ = w.Write(b)
}
