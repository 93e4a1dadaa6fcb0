package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestServes produces to and consumes from the cluster that
// emulator/with-kafka.sh started (KAFKA_BROKERS) through a consumer group,
// commits, and reads the commit back: what the Kafka transport's tests rely on.
func TestServes(t *testing.T) {
	brokers := os.Getenv("KAFKA_BROKERS")
	if brokers == "" {
		if os.Getenv("CLAIMFIRST_KAFKA") != "" {
			t.Fatal("CLAIMFIRST_KAFKA is set but KAFKA_BROKERS is not")
		}
		t.Skip("no Kafka: run under emulator/with-kafka.sh (make test does)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	seeds := strings.Split(brokers, ",")
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	topic := "serves-" + t.Name()
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	if err := admin.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got *kgo.Record
	for got == nil {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record consumed: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = r })
	}
	if string(got.Value) != "v" {
		t.Fatalf("consumed %q, want v", got.Value)
	}
	if err := cl.CommitRecords(ctx, got); err != nil {
		t.Fatal(err)
	}
	offs, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(topic, got.Partition); !ok || o.At != got.Offset+1 {
		t.Fatalf("committed %+v, want offset %d", o, got.Offset+1)
	}
}

// TestControl injects a fault through the control address that
// emulator/with-kafka.sh exports (KAFKA_CONTROL): the group's next two
// commits fail with the error named, the third succeeds, GET counts the
// two, DELETE ends the fault, and a spec naming nothing known is refused.
func TestControl(t *testing.T) {
	brokers, control := os.Getenv("KAFKA_BROKERS"), os.Getenv("KAFKA_CONTROL")
	if brokers == "" || control == "" {
		if os.Getenv("CLAIMFIRST_KAFKA") != "" {
			t.Fatal("CLAIMFIRST_KAFKA is set but KAFKA_BROKERS or KAFKA_CONTROL is not")
		}
		t.Skip("no Kafka control: run under emulator/with-kafka.sh (make test does)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	post := func(spec string) (int, string) {
		resp, err := http.Post("http://"+control+"/faults", "application/json", strings.NewReader(spec))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	for _, bad := range []string{`{"request": "Nonsense"}`, `{"error": "NO_SUCH_ERROR"}`, `{"count": -2}`, `{"groop": "g"}`} {
		if code, body := post(bad); code != http.StatusBadRequest {
			t.Errorf("POST %s: %d %s, want 400", bad, code, body)
		}
	}
	group := "control-" + t.Name()
	code, body := post(fmt.Sprintf(`{"request": "OffsetCommit", "group": %q, "error": "GROUP_AUTHORIZATION_FAILED", "count": 2}`, group))
	if code != http.StatusOK {
		t.Fatalf("POST: %d %s", code, body)
	}
	var added struct{ ID int }
	if err := json.Unmarshal([]byte(body), &added); err != nil {
		t.Fatal(err)
	}
	adm := newAdmin(t, brokers)
	topic := "control-" + t.Name()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	offs := kadm.Offsets{}
	offs.AddOffset(topic, 0, 1, -1)
	for i, want := range []error{kerr.GroupAuthorizationFailed, kerr.GroupAuthorizationFailed, nil} {
		resp, err := adm.CommitOffsets(ctx, group, offs)
		if err == nil {
			err = resp.Error()
		}
		if !errors.Is(err, want) && (want != nil || err != nil) {
			t.Errorf("commit %d: %v, want %v", i+1, err, want)
		}
	}
	url := fmt.Sprintf("http://%s/faults/%d", control, added.ID)
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	var hits struct{ Hits int }
	_ = json.NewDecoder(resp.Body).Decode(&hits)
	_ = resp.Body.Close()
	if hits.Hits != 2 {
		t.Errorf("GET %s: %d hits, want 2", url, hits.Hits)
	}
	req, _ := http.NewRequest(http.MethodDelete, url, nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE %s: %s, want 204", url, resp.Status)
	}
}

func newAdmin(t *testing.T, brokers string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}
