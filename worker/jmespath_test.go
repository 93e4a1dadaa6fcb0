package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/keyexpr"
	"github.com/claimfirst/claimfirst/worker"
)

// snsWrapped is an order as SNS delivers it to SQS with raw delivery off.
func snsWrapped(snsID, order string) string {
	return `{"Type":"Notification","MessageId":"` + snsID + `","TopicArn":"arn:aws:sns:eu-west-1:111122223333:orders",` +
		`"Message":"` + strings.ReplaceAll(order, `"`, `\"`) + `","Timestamp":"2026-12-04T10:00:00.000Z",` +
		`"SignatureVersion":"1","Signature":"EXAMPLE","SigningCertURL":"https://sns.eu-west-1.amazonaws.com/x.pem",` +
		`"UnsubscribeURL":"https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe"}`
}

// eventBridgeWrapped is an order as an EventBridge rule delivers it to SQS.
func eventBridgeWrapped(id, order string) string {
	return `{"version":"0","id":"` + id + `","detail-type":"Order Placed","source":"com.example.orders",` +
		`"account":"111122223333","time":"2026-12-04T10:00:00Z","region":"eu-west-1","resources":[],"detail":` + order + `}`
}

type recorder struct {
	mu   sync.Mutex
	keys []string
	envs []string
}

func (r *recorder) Handle(_ context.Context, m *worker.Message) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, m.Key)
	r.envs = append(r.envs, m.Envelope)
	return "done:" + m.Key, nil
}

func TestJMESPathKeysThroughEnvelopes(t *testing.T) {
	t.Parallel()
	dec, err := worker.KeyFromJMESPath(keyexpr.Config{Key: "order_id", Fingerprint: "[amount, currency]"})
	if err != nil {
		t.Fatal(err)
	}
	order := `{"order_id":"ord_1","amount":1999,"currency":"EUR"}`
	for _, tc := range []struct {
		name      string
		keep      bool
		bodies    []string
		wantKeys  []string
		wantEnv   []string
		wantFails int
		reason    string
	}{
		// The same order arrives raw, through SNS twice (an SNS retry is a
		// new SQS message) and through EventBridge: one key, handled once.
		{name: "unwrapped", bodies: []string{order, snsWrapped("sns-1", order), snsWrapped("sns-1", order), eventBridgeWrapped("eb-1", order)},
			wantKeys: []string{"ord_1"}, wantEnv: []string{""}},
		{name: "sns first", bodies: []string{snsWrapped("sns-1", order), order},
			wantKeys: []string{"ord_1"}, wantEnv: []string{"sns"}},
		{name: "eventbridge first", bodies: []string{eventBridgeWrapped("eb-1", order), order},
			wantKeys: []string{"ord_1"}, wantEnv: []string{"eventbridge"}},
		// With KeepEnvelopes the expression looks at the envelope, finds no
		// order_id, and the message is poison.
		{name: "kept", keep: true, bodies: []string{snsWrapped("sns-1", order)}, wantFails: 1},
		{name: "missing key", bodies: []string{snsWrapped("sns-2", `{"amount":5}`)}, wantFails: 1},
		// The same key with another amount is a key reused, not a duplicate.
		{name: "reused", bodies: []string{order, snsWrapped("sns-3", strings.Replace(order, "1999", "2999", 1))},
			wantKeys: []string{"ord_1"}, wantEnv: []string{""}, wantFails: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			e := engine(t, worker.Protocol{
				Store: memory.New(memory.Config{}), Retention: time.Hour, Handler: rec, Decoder: dec,
				KeepEnvelopes: tc.keep, Logger: slog.New(slog.DiscardHandler),
			})
			fails := 0
			for i, b := range tc.bodies {
				if !deliver(e, worker.Message{ID: fmt.Sprint("m", i), Body: b}) {
					fails++
				}
			}
			if fmt.Sprint(rec.keys) != fmt.Sprint(tc.wantKeys) || fmt.Sprint(rec.envs) != fmt.Sprint(tc.wantEnv) || fails != tc.wantFails {
				t.Errorf("handled keys %q envelopes %q, %d failures; want %q, %q, %d", rec.keys, rec.envs, fails, tc.wantKeys, tc.wantEnv, tc.wantFails)
			}
		})
	}
}

func TestKeyFromJMESPathRejectsBadExpressions(t *testing.T) {
	t.Parallel()
	if _, err := worker.KeyFromJMESPath(keyexpr.Config{Key: "a.["}); err == nil || !strings.Contains(err.Error(), `Key "a.["`) {
		t.Errorf("KeyFromJMESPath = %v, want an error naming Key", err)
	}
}

// Keys from a path in the payload, for a queue subscribed to an SNS topic:
// the notification's envelope comes off before the expression is applied,
// so a message published twice (an SNS retry) is handled once.
func ExampleKeyFromJMESPath() {
	dec, err := worker.KeyFromJMESPath(keyexpr.Config{
		Key:         "order_id",           // Powertools' event_key_jmespath
		Fingerprint: "[amount, currency]", // payload_validation_jmespath
	})
	if err != nil {
		panic(err)
	}
	e, err := worker.NewEngine(worker.Protocol{
		Store: memory.New(memory.Config{}), Retention: 24 * time.Hour, Decoder: dec,
		Logger: slog.New(slog.DiscardHandler),
		Handler: worker.HandlerFunc(func(_ context.Context, m *worker.Message) (string, error) {
			fmt.Println("charging", m.Key, "from", m.Envelope)
			return "charged", nil
		}),
	}, worker.EngineOptions{})
	if err != nil {
		panic(err)
	}
	order := `{"order_id":"ord_7","amount":1999,"currency":"EUR"}`
	for _, id := range []string{"sqs-1", "sqs-2"} { // two deliveries of one publication, as any transport hands them over
		m := &worker.Message{ID: id, Body: snsWrapped("sns-7", order), Attempt: 1}
		e.Process(context.Background(), m, worker.Hold{Until: time.Now().Add(time.Minute)})
	}
	// Output:
	// charging ord_7 from sns
}

// Two EventBridge events about one order: the order's id is in "detail",
// each event's own id at the top of the body. An expression searches the
// event's detail (the message as published); one that starts with $body
// searches the body as SQS delivered it, so "$body.id" keys each event by
// its own id and both run, where "id" finds the order's id and runs one.
func TestKeyExpressionRoots(t *testing.T) {
	t.Parallel()
	placed := eventBridgeWrapped("ev-1", `{"id":"ord-1","status":"placed"}`)
	paid := eventBridgeWrapped("ev-2", `{"id":"ord-1","status":"paid"}`)
	for _, tc := range []struct {
		name, expr string
		keep       bool
		wantKeys   []string
	}{
		{name: "the payload", expr: "id", wantKeys: []string{"ord-1"}},
		{name: "the body", expr: "$body.id", wantKeys: []string{"ev-1", "ev-2"}},
		{name: "the body, envelopes kept", expr: "$body.id", keep: true, wantKeys: []string{"ev-1", "ev-2"}},
		{name: "the body and the payload", expr: "$body.[id, detail.id]", wantKeys: []string{`["ev-1","ord-1"]`, `["ev-2","ord-1"]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dec, err := worker.KeyFromJMESPath(keyexpr.Config{Key: tc.expr})
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			e := engine(t, worker.Protocol{
				Store: memory.New(memory.Config{}), Retention: time.Hour, Handler: rec, Decoder: dec,
				KeepEnvelopes: tc.keep, Logger: slog.New(slog.DiscardHandler),
			})
			for i, b := range []string{placed, paid} {
				if !deliver(e, worker.Message{ID: fmt.Sprint("m", i), Body: b}) {
					t.Fatalf("delivery %d not done", i)
				}
			}
			if fmt.Sprint(rec.keys) != fmt.Sprint(tc.wantKeys) {
				t.Errorf("handled keys %q; want %q", rec.keys, tc.wantKeys)
			}
		})
	}
}
