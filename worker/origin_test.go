package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/internal/syncbuf"
	"github.com/claimfirst/claimfirst/origin"
)

// testSecret signs and verifies OriginalIDAttribute in these tests.
const testSecret origin.Secret = "0123456789abcdef-test"

// TestForgedOriginalIDIgnored: a producer who sets OriginalMessageId to
// another message's id does not get that message's key: the message is
// keyed by its own SQS id and processed, and one WARN names it.
func TestForgedOriginalIDIgnored(t *testing.T) {
	t.Parallel()
	var ran []string
	f := newFixture(HandlerFunc(func(_ context.Context, m *Message) (string, error) {
		ran = append(ran, m.Key)
		return "done", nil
	}))
	var logs syncbuf.Buffer
	f.p.log = slog.New(slog.NewJSONHandler(&logs, nil))
	ctx := context.Background()
	if d := f.p.process(ctx, &Message{ID: "victim", Body: "pay 1", Attempt: 1}, f.lease()); d.Action != Ack {
		t.Fatalf("victim: %v", d.Action)
	}
	for i, forged := range []string{"victim", "victim.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"} {
		m := &Message{ID: fmt.Sprintf("m-%d", i), Body: "pay 2", Attempt: 1,
			Attributes: map[string]string{OriginalIDAttribute: forged}}
		id := m.ID
		if d := f.p.process(ctx, m, f.lease()); d.Action != Ack {
			t.Fatalf("forged %q: %v", forged, d.Action)
		}
		if m.Key != id || m.OriginalID() != id {
			t.Errorf("forged %q: key %q, OriginalID %q; want the SQS id %q", forged, m.Key, m.OriginalID(), id)
		}
		if n := strings.Count(logs.String(), `"level":"WARN","msg":"ignoring the message's OriginalMessageId`); n != i+1 ||
			!strings.Contains(logs.String(), `"message_id":"`+id+`"`) {
			t.Errorf("forged %q: want one WARN naming %s:\n%s", forged, id, logs.String())
		}
	}
	if len(ran) != 3 {
		t.Errorf("handler ran for %v; want the victim and both forged messages, each under its own key", ran)
	}
}

// TestSignedOriginalIDBelieved: the worker's own signed OriginalMessageId
// (a redriven dead letter) keys the message by the id it first arrived
// with, so it is the duplicate of the completed first delivery; without
// the secret, or over another body, the same value is not believed.
func TestSignedOriginalIDBelieved(t *testing.T) {
	t.Parallel()
	runs := 0
	f := newFixture(HandlerFunc(func(context.Context, *Message) (string, error) { runs++; return "done", nil }))
	ctx := context.Background()
	if d := f.p.process(ctx, &Message{ID: "first", Body: "pay 1", Attempt: 1}, f.lease()); d.Action != Ack {
		t.Fatalf("first: %v", d.Action)
	}
	signed := origin.Sign(testSecret, "first", "2026-01-02T03:04:05Z", "pay 1")
	redriven := func(body string) *Message {
		return &Message{ID: "redriven", Body: body, Attempt: 1,
			Attributes: map[string]string{OriginalIDAttribute: signed, FirstReceivedAttribute: "2026-01-02T03:04:05Z"}}
	}
	for _, tc := range []struct {
		name    string
		secret  origin.Secret
		body    string
		wantKey string
	}{
		{"no secret", "", "pay 1", "redriven"},
		{"another body", testSecret, "pay 2", "redriven"},
		{"signed", testSecret, "pay 1", "first"},
	} {
		f.p.originSecret = tc.secret
		m := redriven(tc.body)
		f.p.process(ctx, m, f.lease())
		if m.Key != tc.wantKey || m.OriginalID() != tc.wantKey {
			t.Errorf("%s: key %q, OriginalID %q; want %q", tc.name, m.Key, m.OriginalID(), tc.wantKey)
		}
		f.clock.Advance(time.Minute)
		if _, err := f.store.Forget(ctx, "redriven"); err != nil && tc.wantKey == "redriven" {
			t.Fatal(err)
		}
	}
	if runs != 3 {
		t.Errorf("handler ran %d times; want the first, and the two not believed (each under its own id)", runs)
	}
}

// TestRedrivenDeliveryLogsOriginalID: a delivery whose OriginalMessageId
// verifies (a dead letter moved back by worker redrive) says its first id
// as original_message_id in its log lines.
func TestRedrivenDeliveryLogsOriginalID(t *testing.T) {
	t.Parallel()
	const secret = origin.Secret("0123456789abcdef0123")
	f := newFixture(ok("done"))
	f.p.originSecret = secret
	var logs syncbuf.Buffer
	f.p.log = slog.New(slog.NewJSONHandler(&logs, nil))
	m := &Message{ID: "moved-copy", Body: "pay 1", Attempt: 1,
		Attributes: map[string]string{OriginalIDAttribute: origin.Sign(secret, "first-id", "", "pay 1")}}
	if d := f.p.process(context.Background(), m, f.lease()); d.Action != Ack {
		t.Fatalf("%+v, want ack", d)
	}
	if !strings.Contains(logs.String(), `"msg":"completed"`) || !strings.Contains(logs.String(), `"original_message_id":"first-id"`) {
		t.Errorf("log of a redriven delivery:\n%s\nwant original_message_id first-id on its lines", logs.String())
	}
}
