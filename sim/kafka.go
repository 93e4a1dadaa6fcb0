package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/claimfirst/claimfirst/internal/plant"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/kafkaworker"
)

// The fault kinds only the Kafka world has.
const (
	// Join starts a member part-way through the run: a rebalance moves
	// partitions to it (their old owner's revoke waits, commits, returns).
	Join Fault = Unencodable << (1 + iota)
	// Lose cuts a member off the brokers past its session timeout, then
	// lets it back: its partitions move while its handlers still run and
	// its claims are still renewed (the store is not cut off), and it finds
	// them lost when it returns.
	Lose
	// CommitError fails OffsetCommit requests at the broker: some before
	// the commit (COORDINATOR_LOAD_IN_PROGRESS), some after it, the answer
	// lost (REQUEST_TIMED_OUT).
	CommitError

	// KafkaFaults is every kind the Kafka world schedules: Crash (a member
	// killed, one at a time while the group is stable), Join, Lose,
	// CommitError, ProducerRetry (a record produced twice, at a new
	// offset), Poison (to the dead-letter topic), StoreError and
	// ProviderTimeout.
	KafkaFaults = Crash | Join | Lose | CommitError | ProducerRetry | Poison | StoreError | ProviderTimeout
)

// KafkaMutant is a fault planted in the Kafka transport's real code, for
// the simulator's mutant tests: a run with one must be caught.
type KafkaMutant int

// The Kafka mutants.
const (
	// NoMutant is the transport as it is.
	NoMutant KafkaMutant = iota
	// CommitBeforeSettle moves a partition's commit past the unsettled
	// records before a settled one.
	CommitBeforeSettle
	// CommitAfterRevoke lets a revoked partition whose records still run at
	// the end of the revoke's grace stay committable: their settling
	// commits it after the revoke callback returned, over the new owner.
	CommitAfterRevoke
)

// KafkaConfig describes a run of the Kafka world: real kafkaworker.Worker
// members of one consumer group on a kfake cluster, over kfake's virtual
// network, charging the payment workload.
type KafkaConfig struct {
	// Seed chooses the workload and the fault schedule.
	Seed uint64
	// Faults are the kinds the seed may turn on. Defaults to KafkaFaults.
	Faults Fault
	// Members is how many members start at once. Defaults to 2 or 3 by
	// seed (a Join adds one more).
	Members int
	// Records is how many distinct payments the producer sends. Defaults to
	// 8 to 24 by seed.
	Records int
	// Mutant plants a fault in the transport. Defaults to NoMutant.
	Mutant KafkaMutant
	// Rerun is the command that reruns this seed, printed with a failure.
	Rerun string
}

// The Kafka world's fixed parameters.
const (
	kafkaTopic       = "payments"
	kafkaGroup       = "payments-workers"
	kafkaSession     = 10 * time.Second
	kafkaRebalance   = 20 * time.Second
	kafkaRevokeGrace = 3 * time.Second
	kafkaFaultWindow = 5 * time.Minute // every fault starts within it
	kafkaSettleBound = 30 * time.Minute
)

// RunKafka runs cfg's Kafka world in a synctest bubble and fails t with
// the violations, the command that reruns the seed and the history of
// the first key that broke. It returns the result for further checks.
func RunKafka(t *testing.T, cfg KafkaConfig) *Result {
	t.Helper()
	r := SimulatedKafka(t, cfg)
	if r != nil && len(r.Violations) > 0 {
		rerun := cfg.Rerun
		if rerun == "" {
			rerun = fmt.Sprintf("go test -tags synctests -run '^%s$' -count=1 .", t.Name())
		}
		t.Error(r.Report(rerun))
	}
	return r
}

// SimulatedKafka runs cfg's Kafka world in a synctest bubble and returns
// its result without failing t on violations: for tests that expect some
// (a mutant).
func SimulatedKafka(t *testing.T, cfg KafkaConfig) *Result {
	t.Helper()
	var r *Result
	synctest.Test(t, func(*testing.T) { r = SimulateKafka(cfg) })
	return r
}

// kworld is one run of the Kafka world. It shares the SQS world's
// workload, claim table, provider, journal and invariants on payments.
type kworld struct {
	*world
	kcfg    KafkaConfig
	net     kfake.VirtualNetwork
	cluster *kfake.Cluster
	admin   *kgo.Client
	parts   int32

	dmu   sync.Mutex
	busy  bool // a crash or a cut is under way: one at a time
	alive map[string]bool
	sent  int             // records produced
	mono  map[int32]int64 // the highest committed offset seen, by partition
	// owners are the partitions' owners (member ids) in each generation
	// of the group seen stable, by generation and partition.
	owners map[int32]map[int32]string
}

// SimulateKafka runs one seed's Kafka world and checks its invariants. It
// must be called inside a testing/synctest bubble; RunKafka does that.
func SimulateKafka(cfg KafkaConfig) *Result {
	if cfg.Faults == 0 {
		cfg.Faults = KafkaFaults
	}
	f := fate(cfg.Seed)
	w := &world{cfg: Config{Seed: cfg.Seed}, f: f, j: newJournal(leaseMargin), start: time.Now(),
		poison: map[string]bool{}, valid: map[string]bool{}, nan: map[string]bool{}}
	for k := Fault(1); k <= CommitError; k <<= 1 {
		if cfg.Faults&k != 0 && f.chance(0.6, "kafka-kind", itoa(int(k))) {
			w.kinds |= k
		}
	}
	w.lastFault = w.start
	k := &kworld{world: w, kcfg: cfg, alive: map[string]bool{}, mono: map[int32]int64{}, owners: map[int32]map[int32]string{}}
	return k.run()
}

func (k *kworld) run() *Result {
	w, f := k.world, k.f
	k.parts = int32(f.intn(2, 4, "partitions"))
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(9092), kfake.ListenFn(k.net.Listen),
		kfake.SeedTopics(k.parts, kafkaTopic, kafkaTopic+kafkaworker.DeadLetterSuffix))
	if err != nil {
		panic(err)
	}
	k.cluster = c
	defer c.Close()
	if k.admin, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.Dialer(k.net.DialContext)); err != nil {
		panic(err)
	}
	defer k.admin.Close()

	w.store, w.onceStore = NewStore(), NewStore()
	w.provider = &Provider{Injected: w.j.inject}
	w.provider.Decide = func(key string, attempt int) ProviderFault {
		return w.chargeFault(f, key, attempt, kafkaFaultWindow)
	}
	w.slowCharges(f, 2*time.Second, 30*time.Second)
	if w.on(StoreError) || w.on(ProviderTimeout) || w.on(CommitError) {
		w.mark(w.start.Add(kafkaFaultWindow))
	}
	k.watchCommits()
	if w.on(CommitError) {
		k.commitFaults()
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { k.monitor(ctx) })
	k.produceAll(ctx, &wg)
	members := k.kcfg.Members
	if members == 0 {
		members = f.intn(2, 3, "members")
	}
	for i := range members {
		wg.Go(func() { k.slot(ctx, i, 0) })
	}
	if w.on(Join) {
		at := f.dur(20*time.Second, 3*time.Minute, "join-at")
		w.mark(w.start.Add(at))
		w.j.inject("join")
		wg.Go(func() { k.slot(ctx, members, at) })
	}
	wedged := k.watch()
	stop()
	wg.Wait()
	return k.check(wedged)
}

// watchCommits checks every OffsetCommit request as the broker takes it:
// a member commits a partition only while no other member owns it in the
// generation the commit names. A revoked partition moves to its new owner
// in a later generation than the one whose revoke callback committed it,
// so a commit of it in the new owner's generation was sent after the
// callback returned.
func (k *kworld) watchCommits() {
	k.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: kafkaGroup, Count: -1, Observe: true,
		When: func(req kmsg.Request) bool {
			r, ok := req.(*kmsg.OffsetCommitRequest)
			if !ok {
				return false
			}
			k.dmu.Lock()
			owners := k.owners[r.Generation]
			var bad []string
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					if o, ok := owners[p.Partition]; ok && t.Topic == kafkaTopic && o != r.MemberID {
						bad = append(bad, fmt.Sprintf("member %s committed partition %d at %d in generation %d, where it is %s's", r.MemberID, p.Partition, p.Offset, r.Generation, o))
					}
				}
			}
			k.dmu.Unlock()
			for _, b := range bad {
				k.j.violate("world", "%s", b)
			}
			return false
		}})
}

// commitFaults fails some OffsetCommit requests at the broker, by the
// seed and the request's number: one kind before the commit, one after it
// with the answer lost.
func (k *kworld) commitFaults() {
	var n int // on the cluster's goroutine only
	decide := func(kind string) func(kmsg.Request) bool {
		return func(kmsg.Request) bool {
			if time.Now().After(k.start.Add(kafkaFaultWindow)) {
				return false
			}
			n++
			if k.f.chance(0.12, "commit-fault", kind, itoa(n)) {
				k.j.inject("commit_" + kind)
				return true
			}
			return false
		}
	}
	k.cluster.Fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: kafkaGroup, Count: -1, Err: kerr.CoordinatorLoadInProgress, When: decide("refused")},
		kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: kafkaGroup, Count: -1, Err: kerr.RequestTimedOut, When: decide("answer_lost")},
	)
}

// produceAll sends the workload over the first two minutes, each payment
// keyed by its id, with producer retries (a new offset).
func (k *kworld) produceAll(ctx context.Context, wg *sync.WaitGroup) {
	f := k.f
	n := k.kcfg.Records
	if n == 0 {
		n = f.intn(8, 24, "records")
	}
	pr, err := kgo.NewClient(kgo.SeedBrokers(k.cluster.ListenAddrs()...), kgo.Dialer(k.net.DialContext))
	if err != nil {
		panic(err)
	}
	var pwg sync.WaitGroup
	defer wg.Go(func() { pwg.Wait(); pr.Close() })
	for i := range n {
		body, _, pay := k.body(i, 1)
		at := time.Duration(i)*(2*time.Minute/time.Duration(n)) + f.dur(0, 3*time.Second, "send", itoa(i))
		send := func(delay time.Duration, attempt int) {
			pwg.Add(1)
			go func() {
				defer pwg.Done()
				if !sleep(ctx, delay) {
					return
				}
				r := &kgo.Record{Topic: kafkaTopic, Key: []byte(pay), Value: []byte(body)}
				if err := pr.ProduceSync(ctx, r).FirstErr(); err != nil {
					if ctx.Err() == nil {
						k.j.violate(pay, "producer: %v", err)
					}
					return
				}
				k.dmu.Lock()
				k.sent++
				k.dmu.Unlock()
				k.j.event(pay, "prod", "produced %s at %d/%d (attempt %d)", pay, r.Partition, r.Offset, attempt)
			}()
		}
		send(at, 1)
		if k.on(ProducerRetry) && f.chance(0.3, "producer-retry", itoa(i)) {
			k.j.inject("producer_retry")
			send(at+f.dur(0, 3*time.Minute, "producer-retry-at", itoa(i)), 2)
		}
	}
}

// knode is a member's network: its dials pass through it, refused while
// it is crashed or cut off; cutting it closes its connections.
type knode struct {
	*node
	net   *kfake.VirtualNetwork
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

var errCut = errors.New("sim: member cut off the brokers")

func (n *knode) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	cut := n.cut
	n.mu.Unlock()
	if cut || n.dead() {
		return nil, errCut
	}
	c, err := n.net.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut || n.dead() {
		_ = c.Close()
		return nil, errCut
	}
	n.conns[c] = true
	return c, nil
}

// sever cuts n off (until mend) and closes its connections.
func (n *knode) sever() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = true
	for c := range n.conns {
		_ = c.Close()
	}
	clear(n.conns)
}

func (n *knode) mend() {
	n.mu.Lock()
	n.cut = false
	n.mu.Unlock()
}

// slot runs member slot i from start on: incarnations one after another
// as the seed crashes them.
func (k *kworld) slot(ctx context.Context, i int, start time.Duration) {
	if !sleep(ctx, start) {
		return
	}
	s := itoa(i)
	for inc := 0; ctx.Err() == nil; inc++ {
		is := itoa(inc)
		n := &knode{node: &node{slot: i, inc: inc, name: fmt.Sprintf("m%d.%d", i, inc), clock: time.Now},
			net: &k.net, conns: map[net.Conn]bool{}}
		var crashAt, cutAt time.Duration
		if inc < 2 && k.on(Crash) && k.f.chance(0.5, "crash", s, is) {
			crashAt = k.f.dur(15*time.Second, kafkaFaultWindow, "crash-at", s, is)
		}
		if inc == 0 && k.on(Lose) && k.f.chance(0.5, "lose", s) {
			cutAt = k.f.dur(15*time.Second, kafkaFaultWindow, "lose-at", s)
		}
		if !k.incarnation(ctx, n, crashAt, cutAt) {
			return
		}
		if !sleep(ctx, k.f.dur(5*time.Second, time.Minute, "restart", s, is)) {
			return
		}
	}
}

// incarnation runs one member process until the world stops (false) or it
// crashes (true: restart it).
func (k *kworld) incarnation(ctx context.Context, n *knode, crashAt, cutAt time.Duration) bool {
	store, handler, decoder := k.clients(n.node)
	cfg := kafkaworker.Config{
		Protocol: worker.Protocol{
			Store: store, Handler: handler, Decoder: decoder, OutageCover: outageCover, Owner: n.name,
			Logger: slog.New(slog.DiscardHandler), Now: n.clock, Retention: 1000 * time.Hour,
		},
		Brokers: k.cluster.ListenAddrs(), Topic: kafkaTopic, Group: kafkaGroup, Concurrency: 4,
		SessionTimeout: kafkaSession, RebalanceTimeout: kafkaRebalance, RevokeGrace: kafkaRevokeGrace,
		CommitInterval: time.Second, ShutdownTimeout: 10 * time.Second, HoldFor: 2 * time.Minute,
		// Build with -tags synctests (kgo's mutexes then block durably).
		// No request is retried inside kgo: a commit waiting out kgo's
		// retry backoff holds the worker's commit lock while a revoke waits
		// for it on a plain mutex, which synctest cannot see past (the
		// bubble's time would stop). The worker commits again at its next
		// interval anyway.
		ClientOptions: []kgo.Opt{kgo.Dialer(n.dial), kgo.ClientID(n.name), kgo.RequestRetries(0)},
	}
	pl := plant.Kafka{CommitPastUnsettled: k.kcfg.Mutant == CommitBeforeSettle, CommitAfterRevoke: k.kcfg.Mutant == CommitAfterRevoke}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wk, err := kafkaworker.New(plant.WithKafka(wctx, pl), cfg)
	if err != nil {
		k.j.violate("world", "%s: kafkaworker.New: %v", n.name, err)
		return false
	}
	k.dmu.Lock()
	k.alive[n.name] = true
	k.dmu.Unlock()
	defer func() {
		k.dmu.Lock()
		delete(k.alive, n.name)
		k.dmu.Unlock()
	}()
	done := make(chan struct{})
	go func() { defer close(done); _ = wk.Run(wctx) }()
	timer := func(d time.Duration) <-chan time.Time {
		if d == 0 {
			return nil
		}
		return time.After(d)
	}
	crash, cut := timer(crashAt), timer(cutAt)
	for {
		select {
		case <-ctx.Done():
			cancel()
			<-done
			return false
		case <-crash:
			crash = nil
			if !k.disrupt(ctx, n.name) {
				continue // the group never settled for it: no crash
			}
			k.j.inject("crash")
			n.crash()
			n.sever()
			cancel()
			<-done
			k.settled(ctx, n.name, false)
			return true
		case <-cut:
			cut = nil
			if !k.disrupt(ctx, n.name) {
				continue
			}
			k.j.inject("lose")
			d := kafkaSession + k.f.dur(2*time.Second, 30*time.Second, "lose-len", itoa(n.slot))
			k.mark(time.Now().Add(d))
			n.sever()
			if !sleep(ctx, d) {
				n.mend()
				cancel()
				<-done
				return false
			}
			n.mend()
			k.settled(ctx, n.name, true)
		}
	}
}

// disrupt waits, up to a minute, for the group to be stable with member
// name and another live one in it and no other crash or cut under way,
// and then takes the turn (settled gives it back). kfake's classic
// coordinator can wedge for good when a leader dies between JoinGroup and
// SyncGroup, or every member at once, which a real broker survives: the
// world never does either.
func (k *kworld) disrupt(ctx context.Context, name string) bool {
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		g := k.cluster.GroupInfo(kafkaGroup)
		k.dmu.Lock()
		ok := !k.busy && g != nil && g.State == "Stable" && len(g.Members) >= 2 && len(k.alive) >= 2 && k.inGroup(g, name)
		if ok {
			k.busy = true
		}
		k.dmu.Unlock()
		if ok {
			k.mark(time.Now().Add(kafkaSession))
			return true
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return false
		}
	}
	return false
}

func (k *kworld) inGroup(g *kfake.GroupInfo, name string) bool {
	return slices.ContainsFunc(g.Members, func(m kfake.GroupMember) bool { return m.ClientID == name })
}

// settled gives the turn back once the group is stable again with name
// out of it (after a crash: its session has expired) or back in it (after
// a cut: it rejoined), or after two minutes.
func (k *kworld) settled(ctx context.Context, name string, in bool) {
	defer func() {
		k.dmu.Lock()
		k.busy = false
		k.dmu.Unlock()
	}()
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); {
		if g := k.cluster.GroupInfo(kafkaGroup); g != nil && g.State == "Stable" && k.inGroup(g, name) == in {
			return
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return
		}
	}
}

// monitor checks, every 200ms, that no partition's committed offset goes
// backwards: a commit that does rewinds the partition's owner (its records
// run again) or, later, loses them for nobody. It notes each stable
// generation's owners for watchCommits.
func (k *kworld) monitor(ctx context.Context) {
	for sleep(ctx, 200*time.Millisecond) {
		g := k.cluster.GroupInfo(kafkaGroup)
		if g == nil {
			continue
		}
		if g.State == "Stable" {
			k.dmu.Lock()
			if k.owners[g.Epoch] == nil {
				owners := map[int32]string{}
				for _, m := range g.Members {
					for _, p := range m.Assignment[kafkaTopic] {
						owners[p] = m.MemberID
					}
				}
				k.owners[g.Epoch] = owners
			}
			k.dmu.Unlock()
		}
		for part, pc := range g.Commits[kafkaTopic] {
			k.dmu.Lock()
			prev, seen := k.mono[part]
			if !seen || pc.Offset > prev {
				k.mono[part] = pc.Offset
			}
			k.dmu.Unlock()
			if seen && pc.Offset < prev {
				k.j.violate("world", "partition %d's committed offset went back from %d to %d", part, prev, pc.Offset)
			}
		}
	}
}

// lag returns, by partition, the end offset and the group's committed
// offset.
func (k *kworld) lag(ctx context.Context) (ends map[int32]int64, committed map[int32]int64, err error) {
	adm := kadm.NewClient(k.admin)
	lo, err := adm.ListEndOffsets(ctx, kafkaTopic)
	if err != nil {
		return nil, nil, err
	}
	ends, committed = map[int32]int64{}, map[int32]int64{}
	lo.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	if g := k.cluster.GroupInfo(kafkaGroup); g != nil {
		for p, c := range g.Commits[kafkaTopic] {
			committed[p] = c.Offset
		}
	}
	return ends, committed, nil
}

// watch waits until the world has settled (everything produced, every
// partition's committed offset at its end, every valid payment completed)
// or the settle bound passed the last fault; it reports a group kfake left
// wedged.
func (k *kworld) watch() (wedged string) {
	for {
		time.Sleep(5 * time.Second)
		now := time.Now()
		if now.Before(k.lastFaultAt()) || now.Before(k.start.Add(3*time.Minute)) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ends, committed, err := k.lag(ctx)
		cancel()
		if err == nil && k.producedAll() && maps.Equal(ends, committed) && k.allCompleted() {
			return ""
		}
		if now.Sub(k.lastFaultAt()) > kafkaSettleBound {
			if g := k.cluster.GroupInfo(kafkaGroup); g == nil || g.State != "Stable" {
				state := "gone"
				if g != nil {
					state = g.State
				}
				return fmt.Sprintf("kfake's group coordinator left the group %s for %s", state, kafkaSettleBound)
			}
			k.j.violate("world", "not settled within %s of the last fault: end offsets %v, committed %v (%v)", kafkaSettleBound, ends, committed, err)
			return ""
		}
	}
}

func (k *kworld) producedAll() bool {
	k.dmu.Lock()
	defer k.dmu.Unlock()
	return k.sent >= k.records()
}

// records is how many records the producer sends, retries counted.
func (k *kworld) records() int {
	n := k.kcfg.Records
	if n == 0 {
		n = k.f.intn(8, 24, "records")
	}
	total := n
	if k.on(ProducerRetry) {
		for i := range n {
			if k.f.chance(0.3, "producer-retry", itoa(i)) {
				total++
			}
		}
	}
	return total
}

func (k *kworld) allCompleted() bool {
	k.mu.Lock()
	valid := slices.Collect(maps.Keys(k.valid))
	k.mu.Unlock()
	for _, p := range valid {
		if len(k.provider.Moved(p)) == 0 {
			return false
		}
	}
	return true
}

// deadLetters reads the dead-letter topic: the payment ids it holds and
// whether each carried its reason.
func (k *kworld) deadLetters() (map[string]bool, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.cluster.ListenAddrs()...), kgo.Dialer(k.net.DialContext),
		kgo.ConsumeTopics(kafkaTopic+kafkaworker.DeadLetterSuffix), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lo, err := kadm.NewClient(cl).ListEndOffsets(ctx, kafkaTopic+kafkaworker.DeadLetterSuffix)
	if err != nil {
		return nil, err
	}
	want := int64(0)
	lo.Each(func(o kadm.ListedOffset) { want += o.Offset })
	out := map[string]bool{}
	for got := int64(0); got < want; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, fmt.Errorf("read %d of %d dead letters: %w", got, want, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			var p payment
			_ = json.Unmarshal(r.Value, &p)
			reason := false
			for _, h := range r.Headers {
				if h.Key == kafkaworker.HeaderReason && len(h.Value) > 0 {
					reason = true
				}
			}
			out[p.ID] = out[p.ID] || reason
		})
	}
	return out, nil
}

// check runs the invariants after the run.
func (k *kworld) check(wedged string) *Result {
	w := k.world
	k.dmu.Lock()
	sent := k.sent
	k.dmu.Unlock()
	r := &Result{Seed: w.cfg.Seed, Faults: w.kinds, Virtual: time.Since(w.start), Messages: sent,
		Store: w.store, Provider: w.provider, Wedged: wedged, j: w.j}
	for _, s := range w.store.Stale() {
		w.j.violate("world", "fencing: %s", s)
	}
	if wedged != "" {
		// Nothing settles in a wedged group: only what must never happen
		// is checked (money moved twice, an entry applied twice).
		for _, a := range k.twice() {
			w.j.violate(a, "money moved or ledger entry applied more than once for payment %s", a)
		}
	} else {
		w.checkPayments(w.store.Ledger())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		ends, committed, err := k.lag(ctx)
		cancel()
		switch {
		case err != nil:
			w.j.violate("world", "end offsets: %v", err)
		case !maps.Equal(ends, committed):
			w.j.violate("world", "committed offsets %v are not the partitions' end offsets %v", committed, ends)
		}
		dead, err := k.deadLetters()
		if err != nil {
			w.j.violate("world", "dead-letter topic: %v", err)
		}
		w.mu.Lock()
		for _, p := range slices.Sorted(maps.Keys(w.poison)) {
			reason, ok := dead[p]
			switch {
			case !ok:
				w.j.violations = append(w.j.violations, violation{key: p, what: fmt.Sprintf("poison %s is not in the dead-letter topic", p)})
			case !reason:
				w.j.violations = append(w.j.violations, violation{key: p, what: fmt.Sprintf("poison %s dead-lettered without a reason", p)})
			}
		}
		for p := range dead {
			if w.valid[p] {
				w.j.violations = append(w.j.violations, violation{key: p, what: fmt.Sprintf("valid payment %s dead-lettered", p)})
			}
		}
		w.mu.Unlock()
	}
	w.j.report(r)
	return r
}

// twice returns the payments whose money moved, or whose ledger entry was
// applied, more than once.
func (k *kworld) twice() []string {
	n := map[string]int{}
	for _, a := range k.store.Ledger() {
		n[a.Ref]++
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var bad []string
	for p := range k.valid {
		if len(k.provider.Moved(p)) > 1 || n[p] > 1 {
			bad = append(bad, p)
		}
	}
	slices.Sort(bad)
	return bad
}
