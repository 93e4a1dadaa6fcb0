package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/internal/pgtest"
	"github.com/claimfirst/claimfirst/provider"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/kafkaworker"
)

// What the Kafka scenarios share: one test's topic, dead-letter topic and
// consumer group on the cluster emulator/with-kafka.sh started, claims in
// PostgreSQL, `worker run` processes, and kfake's faults through the
// emulator's control address.

// kafkaPoisonKey is the Kafka key of the poison record: it is no payment,
// so its key says nothing about one.
const kafkaPoisonKey = "not-a-payment"

// kafkaRun is one test's Kafka resources.
type kafkaRun struct {
	brokers           []string
	topic, dlt, group string
	dbURL, table      string
	cl                *kgo.Client
	adm               *kadm.Client

	mu       sync.Mutex
	produced []*kgo.Record // as the broker acknowledged them
}

// newKafkaRun names a topic, its dead-letter topic, a group and a claim
// table for the test; `worker setup` (setup) creates them.
func newKafkaRun(t *testing.T, prefix string) *kafkaRun {
	t.Helper()
	brokers := kafkaBrokers(t)
	dbURL := pgtest.URL(t)
	topic := awstest.Name(prefix)
	k := &kafkaRun{brokers: brokers, topic: topic, dlt: topic + kafkaworker.DeadLetterSuffix, group: topic + "-group",
		dbURL: dbURL, table: pgtest.Name("claims")}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	k.cl, k.adm = cl, kadm.NewClient(cl)
	return k
}

// env is the broker's and the store's settings of setup and run:
// PostgreSQL's claims and no AWS setting at all, as a Kafka deployment
// need not have any. Short timeouts, so that a dead member's partitions
// move within seconds.
func (k *kafkaRun) env() []string {
	env := slices.DeleteFunc(withoutBrokers(os.Environ()), func(kv string) bool { return strings.HasPrefix(kv, "AWS_") })
	return append(append(env, k.settings()...), "CLAIM_TABLE="+k.table)
}

// settings are the broker's and the store's settings alone.
func (k *kafkaRun) settings() []string {
	return []string{"KAFKA_BROKERS=" + strings.Join(k.brokers, ","), "KAFKA_TOPIC=" + k.topic, "KAFKA_GROUP=" + k.group,
		"KAFKA_SESSION_TIMEOUT=6s", "KAFKA_REBALANCE_TIMEOUT=8s", "STORE=postgres", "DATABASE_URL=" + k.dbURL}
}

// setup runs `worker setup -postgres`: the topics and the claim table.
func (k *kafkaRun) setup(t *testing.T) {
	t.Helper()
	if code, stdout, stderr := runBinary(t, k.env(), "setup", "-postgres"); code != 0 {
		t.Fatalf("setup: exit %d\n%s%s", code, stdout, stderr)
	}
}

// runEnv is a worker's environment: env, the provider at providerURL,
// metrics on metricsAddr, and extra.
func (k *kafkaRun) runEnv(providerURL, metricsAddr string, extra ...string) []string {
	env := append(k.env(), "PROVIDER_URL="+providerURL, "METRICS_ADDR="+metricsAddr,
		"WORKER_CONCURRENCY=8", "LOG_LEVEL=info", "SHUTDOWN_TIMEOUT=5s", "PROVIDER_TIMEOUT=2s")
	return append(env, extra...)
}

// produce writes each body as one record, keyed by its payment_id (the
// poison by kafkaPoisonKey), and keeps them as the broker acknowledged them.
func (k *kafkaRun) produce(t *testing.T, bodies []string) {
	t.Helper()
	rs := make([]*kgo.Record, len(bodies))
	for i, body := range bodies {
		key := kafkaPoisonKey
		var p provider.Payment
		if json.Unmarshal([]byte(body), &p) == nil && p.PaymentID != "" {
			key = p.PaymentID
		}
		rs[i] = &kgo.Record{Topic: k.topic, Key: []byte(key), Value: []byte(body)}
	}
	if err := k.cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	k.produced = append(k.produced, rs...)
	k.mu.Unlock()
}

// settled reports whether the group's committed offset of every partition
// is the partition's end, and if not, which lag.
func (k *kafkaRun) settled(ctx context.Context) (bool, string, error) {
	ends, err := k.adm.ListEndOffsets(ctx, k.topic)
	if err != nil {
		return false, "", err
	}
	offs, err := k.adm.FetchOffsets(ctx, k.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return false, "no group yet", nil
	}
	if err != nil {
		return false, "", err
	}
	var behind []string
	ends.Each(func(e kadm.ListedOffset) {
		o, ok := offs.Lookup(k.topic, e.Partition)
		if !ok || o.At != e.Offset {
			behind = append(behind, fmt.Sprintf("partition %d committed %d of %d", e.Partition, o.At, e.Offset))
		}
	})
	return len(behind) == 0, strings.Join(behind, ", "), nil
}

// committed is the group's committed offset of partition, -1 for none.
func (k *kafkaRun) committed(ctx context.Context, partition int32) (int64, error) {
	offs, err := k.adm.FetchOffsets(ctx, k.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	if o, ok := offs.Lookup(k.topic, partition); ok {
		return o.At, nil
	}
	return -1, nil
}

// anyCommitted names the partitions the group has committed offsets of,
// "" for none.
func (k *kafkaRun) anyCommitted(ctx context.Context) (string, error) {
	offs, err := k.adm.FetchOffsets(ctx, k.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var at []string
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == k.topic && o.At >= 0 {
			at = append(at, fmt.Sprintf("partition %d at %d", o.Partition, o.At))
		}
	})
	return strings.Join(at, ", "), nil
}

// waitSettled waits up to timeout for settled, failing the test with what
// lags and with status's words.
func (k *kafkaRun) waitSettled(t *testing.T, timeout time.Duration, status func() string) {
	t.Helper()
	for end := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		done, why, err := k.settled(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("not settled after %s: %s; %s", timeout, why, status())
		}
	}
}

// deadLetters reads every record of the dead-letter topic.
func (k *kafkaRun) deadLetters(ctx context.Context) ([]*kgo.Record, error) {
	ends, err := k.adm.ListEndOffsets(ctx, k.dlt)
	if err != nil {
		return nil, err
	}
	var want int64
	ends.Each(func(e kadm.ListedOffset) { want += e.Offset })
	if want == 0 {
		return nil, nil
	}
	r, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ConsumeTopics(k.dlt), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var recs []*kgo.Record
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for int64(len(recs)) < want {
		fs := r.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return recs, fmt.Errorf("read %d of %d dead letters: %w", len(recs), want, err)
		}
		fs.EachRecord(func(rec *kgo.Record) { recs = append(recs, rec) })
	}
	return recs, nil
}

// checkPoisonDeadLetters fails the test unless every dead letter is the
// poison record, at least one, each with the headers that say why and
// where it was: reason, attempt, original topic, partition, offset,
// timestamp and key.
func (k *kafkaRun) checkPoisonDeadLetters(t *testing.T, dead []*kgo.Record) {
	t.Helper()
	k.mu.Lock()
	var poison *kgo.Record
	for _, r := range k.produced {
		if string(r.Key) == kafkaPoisonKey {
			poison = r
		}
	}
	k.mu.Unlock()
	if poison == nil {
		t.Fatal("no poison record was produced")
	}
	if len(dead) == 0 {
		t.Errorf("nothing dead-lettered, want the poison record")
	}
	for _, d := range dead {
		h := map[string]string{}
		for _, kv := range d.Headers {
			h[kv.Key] = string(kv.Value)
		}
		if !bytes.Equal(d.Value, poison.Value) || string(d.Key) != kafkaPoisonKey {
			t.Errorf("dead letter %q (key %q), want only the poison record %q", d.Value, d.Key, poison.Value)
			continue
		}
		if !strings.HasPrefix(h[kafkaworker.HeaderReason], worker.CodePoison) {
			t.Errorf("dead letter's %s %q, want it to begin with %q", kafkaworker.HeaderReason, h[kafkaworker.HeaderReason], worker.CodePoison)
		}
		if a, err := strconv.Atoi(h[kafkaworker.HeaderAttempt]); err != nil || a < 1 {
			t.Errorf("dead letter's %s %q, want a delivery number", kafkaworker.HeaderAttempt, h[kafkaworker.HeaderAttempt])
		}
		for _, want := range [][2]string{
			{kafkaworker.HeaderTopic, poison.Topic},
			{kafkaworker.HeaderPartition, strconv.Itoa(int(poison.Partition))},
			{kafkaworker.HeaderOffset, strconv.FormatInt(poison.Offset, 10)},
			{kafkaworker.HeaderTimestamp, strconv.FormatInt(poison.Timestamp.UnixMilli(), 10)},
			{kafkaworker.HeaderKey, kafkaPoisonKey},
		} {
			if got, ok := h[want[0]]; !ok || got != want[1] {
				t.Errorf("dead letter's %s = %q (present %v), want %q", want[0], got, ok, want[1])
			}
		}
	}
}

// claimsCompleted fails the test unless the claim table holds want
// claims, every one completed: a claim left in progress is a record taken
// and never settled by anyone since (a commit that skipped it).
func (k *kafkaRun) claimsCompleted(t *testing.T, want int) {
	t.Helper()
	rows, err := pgtest.Pool(t).Query(context.Background(), "SELECT key, status FROM "+k.table+" ORDER BY key")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	var open []string
	for rows.Next() {
		var key, status string
		if err := rows.Scan(&key, &status); err != nil {
			t.Fatal(err)
		}
		n++
		if status != "COMPLETED" {
			open = append(open, key+" "+status)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(open) > 0 {
		t.Errorf("%d of %d claims not completed at the end, such as %s", len(open), n, strings.Join(open[:min(len(open), 5)], ", "))
	}
	if n != want {
		t.Errorf("%d claims at the end, want %d (one per payment)", n, want)
	}
}

// broker is k as binaryPayments drives it.
func (k *kafkaRun) broker() brokerUnderTest {
	return brokerUnderTest{
		env: k.settings(), table: k.table, setup: []string{"-postgres"}, noAWS: true,
		wantOut: []string{"KAFKA_TOPIC=" + k.topic, "KAFKA_DEAD_LETTER_TOPIC=" + k.dlt},
		produce: k.produce,
		settled: k.settled,
		deadOnes: func(ctx context.Context) ([]string, error) {
			recs, err := k.deadLetters(ctx)
			var reasons []string
			for _, r := range recs {
				for _, h := range r.Headers {
					if h.Key == kafkaworker.HeaderReason {
						reasons = append(reasons, string(h.Value))
					}
				}
			}
			return reasons, err
		},
	}
}

// kafkaControl is the address of the emulator's fault control, which
// emulator/with-kafka.sh exports; a cluster of the user's own has none.
func kafkaControl(t *testing.T) string {
	t.Helper()
	c := os.Getenv("KAFKA_CONTROL")
	if c == "" {
		if os.Getenv("CLAIMFIRST_KAFKA") != "" {
			t.Fatal("KAFKA_CONTROL is not set though emulator/with-kafka.sh started the cluster")
		}
		t.Skip("needs kfake's fault control (KAFKA_CONTROL): run under emulator/with-kafka.sh (make test does), not a cluster of your own")
	}
	return c
}

// kafkaFault is one fault injected through the emulator's control.
type kafkaFault struct {
	control string
	id      int
}

// addKafkaFault fails the requests spec selects (emulator/kafka/main.go
// documents the fields) until removed or the test ends.
func addKafkaFault(t *testing.T, control string, spec map[string]any) *kafkaFault {
	t.Helper()
	body, _ := json.Marshal(spec)
	resp, err := http.Post("http://"+control+"/faults", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ ID int }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
		t.Fatalf("fault %s: status %d", body, resp.StatusCode)
	}
	f := &kafkaFault{control: control, id: out.ID}
	t.Cleanup(func() { _ = f.remove() })
	return f
}

// hits is how many requests the fault failed.
func (f *kafkaFault) hits(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s/faults/%d", f.control, f.id))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Hits int }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Hits
}

// remove ends the fault.
func (f *kafkaFault) remove() error {
	req, _ := http.NewRequest(http.MethodDelete, fmt.Sprintf("http://%s/faults/%d", f.control, f.id), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotFound {
		return fmt.Errorf("remove fault %d: status %d", f.id, resp.StatusCode)
	}
	return nil
}

// groupStable waits until the group is Stable with members members, as
// kfake needs before one is killed (emulator/kafka/main.go says why).
func (k *kafkaRun) groupStable(t *testing.T, members int, timeout time.Duration) {
	t.Helper()
	var last string
	for end := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		gs, err := k.adm.DescribeGroups(context.Background(), k.group)
		if err == nil {
			if g, ok := gs[k.group]; ok {
				last = fmt.Sprintf("%s with %d members", g.State, len(g.Members))
				if g.State == "Stable" && len(g.Members) == members {
					return
				}
			}
		}
		if time.Now().After(end) {
			t.Fatalf("group %s not Stable with %d members after %s: %s", k.group, members, timeout, last)
		}
	}
}

// chargedOnce fails the test unless each of ps was charged exactly once,
// naming the first few that were not and counting them all.
func chargedOnce(t *testing.T, byPayment map[string]int64, ps []provider.Payment) {
	t.Helper()
	var total int64
	for _, n := range byPayment {
		total += n
	}
	var never, twice []string
	for _, p := range ps {
		switch c := byPayment[p.PaymentID]; {
		case c == 0:
			never = append(never, p.PaymentID)
		case c > 1:
			twice = append(twice, fmt.Sprintf("%s %d times", p.PaymentID, c))
		}
	}
	few := func(ids []string) string { return strings.Join(ids[:min(len(ids), 5)], ", ") }
	if len(never) > 0 {
		t.Errorf("%d of %d payments never charged (lost), such as %s", len(never), len(ps), few(never))
	}
	if len(twice) > 0 {
		t.Errorf("%d of %d payments charged more than once: %s", len(twice), len(ps), few(twice))
	}
	if total != int64(len(ps)) {
		t.Errorf("%d charges, want %d", total, len(ps))
	}
}
