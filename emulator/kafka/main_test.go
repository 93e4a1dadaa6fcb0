package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
