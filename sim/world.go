package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/envelope"
	"github.com/claimfirst/claimfirst/keyexpr"
	"github.com/claimfirst/claimfirst/once"
	"github.com/claimfirst/claimfirst/origin"
	"github.com/claimfirst/claimfirst/redrive"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/sqsworker"
)

// Fault is a kind of fault a run may inject; Faults is a set of them.
type Fault uint32

// The fault kinds. A seed turns each kind of the configured set on or off
// for its run, and then schedules the faults of the kinds it turned on.
const (
	// Crash kills a worker at an instant and restarts it later.
	Crash Fault = 1 << iota
	// Stall pauses a worker past its lease (a GC pause, SIGSTOP).
	Stall
	// Drain stops a worker gracefully (SIGTERM) and restarts it; a handler
	// still running at the shutdown timeout runs on in the old process.
	Drain
	// Skew gives each worker a clock off by less than the lease margin.
	Skew
	// Duplicate delivers a standard queue's message again while it is held.
	Duplicate
	// StaleDelete lets a delete with an old receipt handle leave the message.
	StaleDelete
	// StoreError fails claim store calls before or after the write, throttles
	// and slows them.
	StoreError
	// StoreOutage takes the claim store down for a while, within the cover.
	StoreOutage
	// ProviderTimeout makes charges time out after moving the money, and
	// slows some.
	ProviderTimeout
	// ProviderOutage answers 503 or 401 for a while, within the cover.
	ProviderOutage
	// LongOutage takes the provider down longer than the outage cover: valid
	// messages may be dead-lettered, then an operator redrives them.
	LongOutage
	// Poison sends messages that can never be decoded.
	Poison
	// ProducerRetry sends a message again as a new message (the producer
	// retried); a FIFO queue deduplicates it within five minutes.
	ProducerRetry
	// BadClock sets one worker's clock off AWS's by more than its
	// ClockSkewMax (5s to 2m, either way): it must notice from SQS's
	// answers and claim nothing, while the others do the work.
	BadClock
	// RenewalBlip fails a holder's lease renewals, and only those, for
	// about a lease (15s to 45s) from a renewal the seed picks, while SQS
	// still extends the message's visibility: the lease runs out on the
	// worker's clock, the handler's context ends, and what the handler
	// returns must still be completed or released (the store never said
	// the lease is lost).
	RenewalBlip
	// SNSDuplicate delivers a publication again as a second SQS message
	// carrying the same SNS envelope, as SNS may (runs that publish through
	// SNS: message-id keys on a standard queue, one run in two).
	SNSDuplicate
	// Unencodable gives some payments' receipts a NaN fee the JSON codec
	// refuses (worker.ValueHandler): the charge is made, its result cannot
	// be stored, and the claim must still be completed, never released.
	Unencodable

	// AllFaults is every kind.
	AllFaults = Crash | Stall | Drain | Skew | Duplicate | StaleDelete | StoreError | StoreOutage |
		ProviderTimeout | ProviderOutage | LongOutage | Poison | ProducerRetry | BadClock |
		RenewalBlip | SNSDuplicate | Unencodable
	lastKind = Unencodable // the last kind, for loops over them
)

var faultNames = map[Fault]string{
	Crash: "crash", Stall: "stall", Drain: "drain", Skew: "skew", Duplicate: "duplicate",
	StaleDelete: "stale_delete", StoreError: "store_error", StoreOutage: "store_outage",
	ProviderTimeout: "provider_timeout", ProviderOutage: "provider_outage", LongOutage: "long_outage",
	Poison: "poison", ProducerRetry: "producer_retry", BadClock: "bad_clock",
	RenewalBlip: "renewal_blip", SNSDuplicate: "sns_duplicate", Unencodable: "unencodable",
	Join: "join", Lose: "lose", CommitError: "commit_error", // the Kafka world's (kafka.go)
}

// String names the kinds in f.
func (f Fault) String() string {
	var names []string
	for k, n := range faultNames {
		if f&k != 0 {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// QueueKind chooses the queue a run uses.
type QueueKind int

// The queue kinds.
const (
	// AnyQueue lets the seed choose: a FIFO queue one run in three.
	AnyQueue QueueKind = iota
	// Standard is a standard queue.
	Standard
	// FIFOQueue is a FIFO queue; messages carry a group id.
	FIFOQueue
)

// Config describes a run. The zero value (with a Seed) runs the payment
// workload: each message charges a payment at the Provider under the
// message's idempotency key and commits a ledger entry with its claim.
type Config struct {
	// Seed chooses the workload and the fault schedule. Required for
	// variety; 0 is a seed like any other.
	Seed uint64
	// Faults are the kinds the seed may turn on. Defaults to AllFaults.
	Faults Fault
	// Queue chooses standard or FIFO. Defaults to AnyQueue.
	Queue QueueKind
	// Workers is how many workers run at once. Defaults to 2 or 3 by seed.
	Workers int
	// Messages is how many distinct messages the producer sends. Defaults
	// to 6 to 16 by seed.
	Messages int

	// Handler is a user's own handler, run instead of the payment workload.
	// It does its side effects through Effect, so that a crashed worker's
	// effects stop at its crash. Defaults to the payment workload.
	Handler worker.Handler
	// Once is a user's own function for package once, run instead of the
	// payment workload (and instead of Handler): each delivery's handler
	// calls once.Do with the message's key and Once on a claim table of
	// its own, behind the same faults, clocks, crashes and stalls as the
	// worker's; the message is acked when once.Do returns. Its effects go
	// through Effect, as Handler's do. Defaults to nil.
	Once once.Func
	// Decoder is the user's decoder (with Handler). Defaults to the payment
	// workload's, or to worker.KeyFromMessageID with a user's Handler.
	Decoder worker.Decoder
	// Body returns the body of message i (with Handler) and, on a FIFO
	// queue, its group. A body the Decoder refuses is poison: it must end
	// in the dead-letter queue. Defaults to the payment workload's bodies.
	Body func(i int) (body, group string)
	// Check is the user's oracle, called after the run with its result: it
	// returns what it found wrong (each string a violation). Defaults to nil.
	Check func(r *Result) []string

	// KeyByMessageID keys the payment workload by the message's original id
	// (worker.Message.OriginalID) instead of its payment id; the producer
	// then never retries. Defaults to false; the seed chooses when
	// KeyMode is KeyBySeed.
	KeyByMessageID bool
	// KeyByNumber keys the payment workload by its order number, a JSON
	// number above 2^53 where neighbours share a float64, through
	// worker.KeyFromJMESPath ("order"). Defaults to false; the seed chooses
	// when KeyBySeed is set and the run is not keyed by message id.
	KeyByNumber bool
	// KeyBySeed lets the seed choose KeyByMessageID (one run in three) and
	// otherwise KeyByNumber (three runs in ten).
	KeyBySeed bool
	// SNS publishes the payment workload through an SNS topic: each body
	// is an SNS notification, which the worker takes off. Only with
	// KeyByMessageID on a standard queue, where the seed chooses it one run
	// in two; SNSDuplicate faults then deliver a publication twice.
	// Defaults to false.
	SNS bool

	// Deploy chooses containers, Lambda functions or both. Defaults to
	// AnyDeploy.
	Deploy Deploy

	// Clock returns the clock of worker slot i given the skew the seed chose
	// for it. Defaults to the true clock plus that skew. Tests use it to
	// set a worker's clock ahead.
	Clock func(slot int, skew time.Duration) func() time.Time
	// WrapStore wraps each worker's claim store client (a test-side mutant:
	// a store that checks then writes, drops a condition, ...). The result
	// must implement claimstore.TxCompleter too. Defaults to nil.
	WrapStore func(s claimstore.Store) claimstore.Store
	// Tune changes a container worker's configuration before it starts (a
	// decoder wrapper, a smaller HoldFor). Defaults to nil.
	Tune func(slot int, c *sqsworker.Config)

	// Rerun is the command that reruns this seed, printed with a failure.
	// Defaults to a go test command naming the test.
	Rerun string
}

// user reports whether the run is a user's workload (Handler or Once).
func (c Config) user() bool { return c.Handler != nil || c.Once != nil }

// The world's fixed parameters.
const (
	visibility      = 30 * time.Second
	maxReceiveCount = 10
	outageCover     = 10 * time.Minute
	faultWindow     = 20 * time.Minute // every fault starts and ends within it
	drainBound      = 2 * time.Hour    // after the last fault (or the redrive)
	leaseMargin     = 3 * time.Second  // worker's default for a 30s visibility
	skewMax         = time.Second      // per worker, under the margin

	// A FIFO burst: groups of payments queued before the workers start, so
	// that a receive returns several messages of a group; each payment's
	// first charge refused (503); retries returned to the queue rather than
	// held; the worker's default outage cover (an hour) spread over the
	// queue's maxReceiveCount of 10, so the backoff grows steeply with the
	// failure count (1s, 2.6s, 6.9s, 18s, 47s, 2m, 5m, 14m, 37m). Each
	// failure costs its own message the first, short backoff, so the burst
	// drains within burstDrainBound of its last send; a schedule that charges
	// a message for the receives its group spent in front of it (the
	// messages behind a failing one are returned unstarted, each a receive)
	// stalls the group for many minutes.
	burstCover      = time.Hour
	burstDrainBound = time.Minute
	burstStart      = 5 * time.Second
)

// Result is what a run did and found.
type Result struct {
	// Seed is the run's seed.
	Seed uint64
	// Faults are the kinds the seed turned on.
	Faults Fault
	// FIFO says the queue was a FIFO queue.
	FIFO bool
	// Burst says the run was a FIFO burst: every payment sent at once in a
	// few groups, each failing once (see the world's fifoBurst).
	Burst bool
	// Virtual is the virtual time the run took.
	Virtual time.Duration
	// Messages counts the messages sent to the source queue (producer
	// retries and redriven messages included).
	Messages int
	// Drain is how long the queue took to drain after the last fault (or
	// the redrive).
	Drain time.Duration
	// Injected counts the faults injected, by kind.
	Injected map[string]int
	// Wedged says why kfake's group coordinator left a Kafka run's group
	// unable to settle (kfake's fault, not the worker's); "" otherwise.
	Wedged string
	// Violations are the invariants broken: none in a correct run.
	Violations []string
	// Keys are the keys the violations concern, for History.
	Keys []string

	// Store, Provider and SQS are the run's world, for a user's Check.
	Store    *Store
	Provider *Provider
	SQS      *SQS
	// QueueURL and DeadLetterURL are the source and dead-letter queues.
	QueueURL, DeadLetterURL string

	j *journal
}

// History returns what happened to key, one line per event with its
// virtual time and worker: receives, claims, tokens, effects.
func (r *Result) History(key string) string { return r.j.history(key) }

// Report is the run's failure text: the violations, the rerun command, and
// the history of the first key that broke.
func (r *Result) Report(rerun string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d (faults %s, fifo %v): %d invariant violations\n", r.Seed, r.Faults, r.FIFO, len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  - %s\n", v)
	}
	fmt.Fprintf(&b, "rerun: %s\n", rerun)
	shown := 0
	for _, k := range r.Keys {
		if h := r.History(k); h != "" && shown < 2 {
			fmt.Fprintf(&b, "history of %s:\n%s\n", k, h)
			shown++
		}
	}
	return b.String()
}

// payment is the workload's message.
type payment struct {
	ID      string `json:"payment"`
	Account string `json:"account"`
	Seq     int    `json:"seq"`
	Amount  int64  `json:"amount"`
	// Order is the key of a run keyed by number (Config.KeyByNumber).
	Order uint64 `json:"order,omitempty"`
}

// firstOrder is the first order number of a run keyed by number: 2^53,
// above which a float64 holds only every other integer, then every fourth.
const firstOrder = 1 << 53

// receipt is the payment workload's typed result (worker.ValueHandler).
type receipt struct {
	Charge string `json:"charge"`
	// FeeRate is NaN for a payment the seed makes Unencodable.
	FeeRate float64 `json:"fee_rate"`
}

// world is one run.
type world struct {
	cfg   Config
	f     fate
	kinds Fault
	fifo  bool
	burst bool // a FIFO burst (see burstDrainBound)
	byID  bool
	byNum bool // keyed by the order number (Config.KeyByNumber)
	sns   bool // published through SNS (Config.SNS)
	j     *journal

	sqs      *SQS
	src, dlq string
	store    *Store
	provider *Provider

	onceStore         *Store // the claim table of a user's Once function
	storeOut, provOut []window
	start             time.Time
	lastFault         time.Time

	drain    time.Duration
	mu       sync.Mutex
	poison   map[string]bool // payment ids (or bodies) that are poison
	nan      map[string]bool // payment ids whose receipt does not encode (Unencodable)
	valid    map[string]bool // payment ids that must be charged once
	redriven bool
}

type window struct {
	from, till time.Time
	status     int
}

func (w *world) on(k Fault) bool { return w.kinds&k != 0 }

// Simulate runs one seed's world and checks its invariants. It must be
// called inside a testing/synctest bubble (synctest.Test): the world's
// time is the bubble's virtual clock. Run does that for a test.
func Simulate(cfg Config) *Result {
	if cfg.Faults == 0 {
		cfg.Faults = AllFaults
	}
	f := fate(cfg.Seed)
	w := &world{cfg: cfg, f: f, j: newJournal(leaseMargin), start: time.Now(),
		poison: map[string]bool{}, valid: map[string]bool{}, nan: map[string]bool{}}
	for k := Fault(1); k <= lastKind; k <<= 1 {
		if cfg.Faults&k != 0 && f.chance(0.6, "kind", itoa(int(k))) {
			w.kinds |= k
		}
	}
	switch cfg.Queue {
	case Standard:
	case FIFOQueue:
		w.fifo = true
	default:
		w.fifo = f.chance(1.0/3, "fifo")
	}
	w.byID = cfg.KeyByMessageID || (cfg.KeyBySeed && !cfg.user() && f.chance(1.0/3, "key-by-id"))
	w.byNum = !w.byID && !cfg.user() && (cfg.KeyByNumber || (cfg.KeyBySeed && f.chance(0.3, "key-by-number")))
	w.sns = w.byID && !w.fifo && !cfg.user() && (cfg.SNS || (cfg.KeyBySeed && f.chance(0.5, "sns")))
	if !w.sns {
		w.kinds &^= SNSDuplicate
	}
	if cfg.user() {
		w.kinds &^= Unencodable // the payment workload's receipts
	}
	if w.fifo {
		w.kinds &^= Duplicate | StaleDelete // FIFO queues deliver exactly once
	}
	if w.fifo && !cfg.user() && !w.byID && f.chance(0.35, "fifo-burst") {
		// The burst's own fault (each payment refused once) is the only one:
		// its drain bound is tight, and only a schedule fault can miss it.
		w.burst, w.kinds = true, 0
	}
	w.lastFault = w.start
	return w.run()
}

func (w *world) mark(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.After(w.lastFault) {
		w.lastFault = t
	}
}

func (w *world) lastFaultAt() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastFault
}

// windows schedules up to n outage windows of at most maxLen within the
// fault window.
func (w *world) windows(name string, n int, maxLen time.Duration, statuses ...int) []window {
	var ws []window
	for i := range w.f.intn(1, n, name, "n") {
		from := w.start.Add(w.f.dur(time.Minute, faultWindow-maxLen, name, itoa(i), "from"))
		till := from.Add(w.f.dur(30*time.Second, maxLen, name, itoa(i), "len"))
		st := statuses[w.f.intn(0, len(statuses)-1, name, itoa(i), "status")]
		ws = append(ws, window{from: from, till: till, status: st})
		w.mark(till)
	}
	return ws
}

// longestOutage is the longest time some dependency was out: the outage
// windows of the store and the provider merged, with gaps under two
// minutes (a message's retry spans them) counted as outage.
func (w *world) longestOutage() time.Duration {
	ws := slices.Concat(w.storeOut, w.provOut)
	slices.SortFunc(ws, func(a, b window) int { return a.from.Compare(b.from) })
	var longest time.Duration
	for i := 0; i < len(ws); {
		from, till := ws[i].from, ws[i].till
		j := i + 1
		for ; j < len(ws) && ws[j].from.Sub(till) < 2*time.Minute; j++ {
			if ws[j].till.After(till) {
				till = ws[j].till
			}
		}
		longest = max(longest, till.Sub(from))
		i = j
	}
	return longest
}

func inWindow(ws []window, t time.Time) int {
	for _, x := range ws {
		if !t.Before(x.from) && t.Before(x.till) {
			return x.status
		}
	}
	return 0
}

func (w *world) run() *Result {
	f := w.f
	// SQS.
	w.sqs = NewSQS(SQSConfig{
		Duplicates: func(id string, rc int) time.Duration {
			if !w.on(Duplicate) || !f.chance(0.15, "dup", id, itoa(rc)) {
				return 0
			}
			w.j.inject("duplicate")
			return f.dur(time.Millisecond, visibility-time.Second, "dup-after", id, itoa(rc))
		},
		StaleDeletes: func(id string, rc int) bool {
			if w.on(StaleDelete) && f.chance(0.5, "stale-delete", id, itoa(rc)) {
				w.j.inject("stale_delete")
				return false
			}
			return true
		},
	})
	suffix := ""
	if w.fifo {
		suffix = ".fifo"
	}
	var err error
	if w.dlq, err = w.sqs.CreateQueue(QueueConfig{Name: "work-dlq" + suffix, Retention: 14 * 24 * time.Hour}); err != nil {
		panic(err)
	}
	// A FIFO queue as `worker setup -fifo` makes it: room for the receives
	// a group's later messages spend behind a failed one (a Lambda function
	// reports them back). The burst keeps 10: its schedule is under test.
	receives := maxReceiveCount
	if w.fifo && !w.burst {
		receives = sqsworker.FIFOMaxReceiveCount
	}
	if w.src, err = w.sqs.CreateQueue(QueueConfig{Name: "work" + suffix, VisibilityTimeout: visibility,
		DeadLetter: "work-dlq" + suffix, MaxReceiveCount: receives}); err != nil {
		panic(err)
	}
	// Store and provider.
	w.store, w.onceStore = NewStore(), NewStore()
	if w.on(StoreOutage) {
		w.storeOut = w.windows("store-outage", 2, 5*time.Minute, 0)
	}
	w.provider = &Provider{Injected: w.j.inject}
	if w.on(ProviderOutage) {
		w.provOut = w.windows("provider-outage", 2, 5*time.Minute, 503, 401)
	}
	if w.on(LongOutage) {
		from := w.start.Add(f.dur(time.Minute, 5*time.Minute, "long-outage", "from"))
		w.provOut = append(w.provOut, window{from: from, till: from.Add(outageCover + 5*time.Minute), status: 503})
		w.mark(from.Add(outageCover + 5*time.Minute))
	}
	w.provider.Outage = func(t time.Time) int { return inWindow(w.provOut, t) }
	w.provider.Decide = func(key string, attempt int) ProviderFault {
		if w.burst {
			if attempt == 1 {
				return ChargeRefused
			}
			return ChargeOK
		}
		return w.chargeFault(f, key, attempt, faultWindow)
	}
	w.slowCharges(f, 5*time.Second, time.Minute)
	if w.on(StoreError) || w.on(ProviderTimeout) || w.on(Duplicate) {
		w.mark(w.start.Add(faultWindow))
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	w.produce(ctx, &wg)
	slots := w.cfg.Workers
	if slots == 0 {
		slots = f.intn(2, 3, "workers")
	}
	for i := range slots {
		wg.Go(func() { w.slot(ctx, i) })
	}
	w.watch()
	stop()
	wg.Wait()
	return w.check()
}

// produce sends the workload, spread over the first minutes, with
// producer retries.
func (w *world) produce(ctx context.Context, wg *sync.WaitGroup) {
	f := w.f
	n := w.cfg.Messages
	if n == 0 {
		n = f.intn(6, 16, "messages")
	}
	groups := f.intn(1, 4, "groups")
	spacing, jitter := 12*time.Second, 10*time.Second
	if w.burst {
		// Groups of up to eight: with every message failing once, the last
		// of a group is returned unstarted once per failure in front of it,
		// and nine receives must leave it its own retry within the queue's
		// maxReceiveCount of 10.
		groups = f.intn(1, 3, "burst-groups")
		n = groups * f.intn(5, 8, "burst-size")
		spacing, jitter = time.Millisecond, 0
		w.mark(w.start.Add(time.Duration(n) * spacing))
	}
	for i := range n {
		body, group, pay := w.body(i, groups)
		// In index order (a FIFO group's order is its send order), over
		// the first minutes (a burst: at once).
		at := time.Duration(i)*spacing + f.dur(0, jitter, "send", itoa(i))
		send := func(delay time.Duration, attempt int) {
			wg.Go(func() {
				t := time.NewTimer(delay)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
				in := &sqs.SendMessageInput{QueueUrl: aws.String(w.src), MessageBody: aws.String(body)}
				if w.fifo {
					in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(fmt.Sprintf("m%d", i))
				}
				out, err := w.sqs.SendMessage(context.Background(), in)
				if err != nil {
					w.j.violate(pay, "producer: send: %v", err)
					return
				}
				w.j.event(pay, "prod", "sent %s as %s (attempt %d)", pay, aws.ToString(out.MessageId), attempt)
			})
		}
		send(at, 1)
		if w.on(SNSDuplicate) && f.chance(0.3, "sns-duplicate", itoa(i)) {
			// SNS delivers the publication again: a second SQS message, the
			// same envelope.
			w.j.inject("sns_duplicate")
			send(at+f.dur(0, 5*time.Minute, "sns-duplicate-at", itoa(i)), 2)
		}
		if w.on(ProducerRetry) && !w.byID && f.chance(0.3, "producer-retry", itoa(i)) {
			w.j.inject("producer_retry")
			send(at+f.dur(0, 8*time.Minute, "producer-retry-at", itoa(i)), 2)
		}
	}
}

// body returns message i's body, its FIFO group and the name its history
// is kept under (the payment id, or the user's key).
func (w *world) body(i, groups int) (body, group, name string) {
	if w.cfg.Body != nil {
		body, group = w.cfg.Body(i)
		if group == "" {
			group = "g"
		}
		m := &worker.Message{ID: fmt.Sprintf("body-%d", i), Body: body}
		if err := w.decoder().Decode(m); err != nil {
			w.mu.Lock()
			w.poison[body] = true
			w.mu.Unlock()
		}
		return body, group, fmt.Sprintf("message %d", i)
	}
	p := payment{ID: fmt.Sprintf("p%d", i), Account: fmt.Sprintf("a%d", i%groups), Seq: i, Amount: int64(100 + i)}
	if w.byNum {
		p.Order = firstOrder + uint64(i)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on(Poison) && w.f.chance(0.15, "poison", itoa(i)) {
		w.j.inject("poison")
		w.poison[p.ID] = true
		// Valid JSON with a payment id, refused by the decoder: its amount.
		p.Amount = -1
		return w.publish(i, p), p.Account, p.ID
	}
	w.valid[p.ID] = true
	if w.on(Unencodable) && w.f.chance(0.2, "unencodable", p.ID) {
		w.j.inject("unencodable")
		w.nan[p.ID] = true
	}
	return w.publish(i, p), p.Account, p.ID
}

// publish returns payment i's body as the producer sends it: its JSON, in
// an SNS notification when the run publishes through SNS.
func (w *world) publish(i int, p payment) string {
	b, _ := json.Marshal(p)
	if !w.sns {
		return string(b)
	}
	n, _ := json.Marshal(map[string]string{
		"Type": "Notification", "MessageId": fmt.Sprintf("sns-%d-%d", w.cfg.Seed, i),
		"TopicArn": "arn:aws:sns:eu-west-1:111122223333:payments", "Message": string(b),
		"Timestamp": w.start.UTC().Format("2006-01-02T15:04:05.000Z"),
	})
	return string(n)
}

// published returns the message a body carries: the body itself, or the
// message inside its SNS envelope.
func published(body string) string { return envelope.Unwrap(body).Body }

// decoder is the workload's decoder.
func (w *world) decoder() worker.Decoder {
	if w.cfg.Decoder != nil {
		return w.cfg.Decoder
	}
	if w.cfg.user() {
		return worker.DecoderFunc(func(m *worker.Message) error { m.Key, m.Payload = m.OriginalID(), m.Body; return nil })
	}
	byOrder, err := worker.KeyFromJMESPath(keyexpr.Config{Key: "order"})
	if err != nil {
		panic(err)
	}
	return worker.DecoderFunc(func(m *worker.Message) error {
		var p payment
		if err := json.Unmarshal([]byte(m.Body), &p); err != nil {
			return fmt.Errorf("payment: %w", err)
		}
		if p.ID == "" || p.Amount <= 0 {
			return fmt.Errorf("payment %q: amount %d must be positive", p.ID, p.Amount)
		}
		switch {
		case w.byID:
			// The default key: the message's id, or its envelope's.
			if err := worker.KeyFromMessageID.Decode(m); err != nil {
				return err
			}
		case w.byNum:
			if err := byOrder.Decode(m); err != nil {
				return err
			}
		default:
			m.Key = p.ID
		}
		m.Payload = p
		return nil
	})
}

// handler is the payment workload's handler: it charges the payment under
// the message's key, commits its ledger entry with the claim, and returns a
// typed receipt (worker.ValueHandler), whose fee rate is NaN, refused by
// the JSON codec, for a payment the seed made Unencodable.
func (w *world) handler() worker.Handler {
	return worker.ValueHandler[receipt]{Func: func(ctx context.Context, m *worker.Message) (receipt, error) {
		p := m.Payload.(payment)
		if w.burst {
			// The request's round trip: the refusal comes back after the
			// tiny HoldFor has passed, so the retry goes through the queue.
			time.Sleep(10 * time.Millisecond)
		}
		var id string
		err := Effect(ctx, func() error {
			var err error
			id, err = w.provider.Charge(ctx, m.Key, p.ID, p.Amount)
			return err
		})
		if err != nil {
			return receipt{}, worker.Dependency("provider", err)
		}
		m.Commit(worker.Tx{Writes: Writes{{Account: p.Account, Ref: p.ID, Seq: p.Seq, Amount: p.Amount, Token: m.Token}}})
		r := receipt{Charge: id, FeeRate: 0.029}
		w.mu.Lock()
		if w.nan[p.ID] {
			r.FeeRate = math.NaN()
		}
		w.mu.Unlock()
		return r, nil
	}}
}

// slot runs worker slot i: incarnations started one after another as the
// seed crashes, stalls and drains them.
func (w *world) slot(ctx context.Context, i int) {
	f := w.f
	s := itoa(i)
	skew := time.Duration(0)
	if w.on(Skew) {
		skew = f.dur(0, 2*skewMax, "skew", s) - skewMax
	}
	lambda := w.lambdaSlot(i)
	var offBy time.Duration
	// Lambda's clocks are AWS's own: a bad clock is a container's.
	if i == 0 && w.on(BadClock) && !lambda {
		offBy = f.dur(5*time.Second, 2*time.Minute, "bad-clock", s)
		if f.chance(0.5, "bad-clock-behind", s) {
			offBy = -offBy
		}
		skew = offBy
		w.j.inject("bad_clock")
	}
	if w.burst && !sleep(ctx, burstStart) {
		return // the burst is queued before any worker starts
	}
	var clock func() time.Time
	if w.cfg.Clock != nil {
		clock = w.cfg.Clock(i, skew)
	} else {
		clock = func() time.Time { return time.Now().Add(skew) }
	}
	for inc := 0; ctx.Err() == nil; inc++ {
		inc := inc
		n := &node{slot: i, inc: inc, name: fmt.Sprintf("w%d.%d", i, inc), clock: clock, offBy: offBy}
		// What ends this incarnation, if anything does before the world stops.
		var crashAt, drainAt, stallAt time.Duration
		is := itoa(inc)
		if inc < 2 && w.on(Crash) && f.chance(0.6, "crash", s, is) {
			crashAt = f.dur(10*time.Second, faultWindow/2, "crash-at", s, is)
		} else if inc < 2 && w.on(Drain) && f.chance(0.5, "drain", s, is) {
			drainAt = f.dur(10*time.Second, faultWindow/2, "drain-at", s, is)
		}
		if inc == 0 && w.on(Stall) && f.chance(0.7, "stall", s) {
			stallAt = f.dur(10*time.Second, faultWindow-5*time.Minute, "stall-at", s)
		}
		if lambda {
			n.name = fmt.Sprintf("f%d.%d", i, inc)
			if !w.lambdaIncarnation(ctx, n, crashAt) {
				return
			}
		} else if !w.incarnation(ctx, n, crashAt, drainAt, stallAt) {
			return
		}
		// Restarted after a while.
		if !sleep(ctx, f.dur(0, 2*time.Minute, "restart", s, is)) {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// originalIDSecret signs the OriginalMessageId of the world's dead letters.
const originalIDSecret origin.Secret = "sim-original-id-secret"

// incarnation runs one worker process until the world stops (false) or
// the process crashes or drains (true: restart it).
func (w *world) incarnation(ctx context.Context, n *node, crashAt, drainAt, stallAt time.Duration) bool {
	store, handler, decoder := w.clients(n)
	cfg := sqsworker.Config{
		QueueURL:        w.src,
		SQS:             gatedSQS{n: n, api: w.sqs},
		Concurrency:     4,
		ShutdownTimeout: 10 * time.Second,
		HoldFor:         2 * time.Minute,
		Protocol: worker.Protocol{
			Store:       store,
			Handler:     handler,
			Decoder:     decoder,
			OutageCover: outageCover,
			Owner:       n.name,
			Logger:      slog.New(slog.DiscardHandler),
			Now:         n.clock,
			// Every worker of the world and its redrive share it.
			OriginalIDSecret: originalIDSecret,
		},
	}
	if w.burst {
		// Every retry goes back through the queue and spends a receive.
		// A receive takes a whole group.
		cfg.OutageCover, cfg.HoldFor, cfg.Concurrency = burstCover, time.Nanosecond, 10
	}
	if n.offBy != 0 {
		reg := prometheus.NewRegistry()
		cfg.Metrics = worker.NewMetrics(reg)
		defer func() { w.noticed(n, reg) }()
	}
	if w.cfg.Tune != nil {
		w.cfg.Tune(n.slot, &cfg)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wk, err := sqsworker.New(wctx, cfg)
	if err != nil {
		w.j.violate("world", "%s: sqsworker.New: %v", n.name, err)
		return false
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = wk.Run(wctx) }()
	timer := func(d time.Duration) <-chan time.Time {
		if d == 0 {
			return nil
		}
		w.mark(time.Now().Add(d))
		return time.After(d)
	}
	crash, drain, stall := timer(crashAt), timer(drainAt), timer(stallAt)
	for {
		select {
		case <-ctx.Done():
			cancel()
			<-done
			return false
		case <-crash:
			w.j.inject("crash")
			n.crash()
			cancel()
			<-done
			return true
		case <-drain:
			w.j.inject("drain")
			cancel()
			<-done
			return true
		case <-stall:
			w.j.inject("stall")
			d := w.f.dur(40*time.Second, 3*time.Minute, "stall-len", itoa(n.slot))
			w.mark(time.Now().Add(d))
			n.stall(time.Now().Add(d))
			stall = nil
		}
	}
}

// noticed checks, as an incarnation whose clock is off beyond its
// ClockSkewMax ends, that the worker noticed: its claimfirst_clock_skewed
// gauge is 1 (it then receives nothing; a claim it made is a violation of
// its own, see recorder.Acquire). A crash before its first answer leaves
// nothing to notice.
func (w *world) noticed(n *node, reg *prometheus.Registry) {
	mfs, err := reg.Gather()
	if err != nil {
		w.j.violate("world", "%s: metrics: %v", n.name, err)
		return
	}
	for _, mf := range mfs {
		if mf.GetName() == "claimfirst_clock_skewed" && len(mf.GetMetric()) == 1 {
			if mf.GetMetric()[0].GetGauge().GetValue() == 1 {
				w.j.inject("bad_clock_noticed")
			} else if !n.isCrashed() {
				w.j.violate("world", "%s: clock %s off AWS's, and claimfirst_clock_skewed is not 1", n.name, n.offBy)
			}
		}
	}
}

// clients are node n's claim store client (its gate, the seed's faults, a
// mutant's wrapper, the recorder), and the workload's handler and decoder,
// journaling what they do, for a worker or a Lambda function on n.
func (w *world) clients(n *node) (claimstore.Store, worker.Handler, worker.Decoder) {
	fs := w.newFaultyStore(n, w.store)
	var store claimstore.Store = gatedStore{n: n, inner: fs, stallAt: w.completionStall(n)}
	if w.cfg.WrapStore != nil {
		store = w.cfg.WrapStore(store)
	}
	store = &recorder{j: w.j, n: n, inner: store, truth: w.store}
	h := w.cfg.Handler
	switch {
	case w.cfg.Once != nil:
		h = w.onceHandler(n, w.newFaultyStore(n, w.onceStore))
	case h == nil:
		h = w.handler()
	}
	dec := w.decoder()
	handler := worker.HandlerFunc(func(hctx context.Context, m *worker.Message) (string, error) {
		hctx = context.WithValue(hctx, nodeKey{}, n)
		r, err := h.Handle(hctx, m)
		w.j.event(w.name(m), n.name, "handler token %d: %s", m.Token, errText(err))
		return r, err
	})
	decoder := worker.DecoderFunc(func(m *worker.Message) error {
		err := dec.Decode(m)
		w.j.alias(m.Key, w.name(m))
		w.j.event(w.name(m), n.name, "received %s receive %d key %q: decode %s", m.ID, m.Attempt, m.Key, errText(err))
		return err
	})
	return store, handler, decoder
}

// newFaultyStore is node n's client of table t: on n's clock, behind the
// seed's store faults and outages.
func (w *world) newFaultyStore(n *node, t *Store) *FaultyStore {
	fs := &FaultyStore{Inner: t.View(n.clock), Injected: w.j.inject,
		Outage: func(t time.Time) bool { return inWindow(w.storeOut, t) != 0 }}
	roll := "store"
	if t != w.store {
		roll = "once-store"
	}
	if w.on(RenewalBlip) {
		fs.Blip = func(key string, attempt int) time.Duration {
			if time.Now().After(w.start.Add(faultWindow)) || !w.f.chance(0.15, roll, "blip", n.name, key, itoa(attempt)) {
				return 0
			}
			// About a lease: the lease runs out on the worker's clock
			// unless the blip ends before the next renewal but one.
			d := w.f.dur(15*time.Second, 45*time.Second, roll, "blip-len", n.name, key, itoa(attempt))
			w.mark(time.Now().Add(d))
			return d
		}
	}
	if w.on(StoreError) {
		fs.Decide = func(op, key string, attempt int) StoreFault {
			if time.Now().After(w.start.Add(faultWindow)) {
				return NoFault
			}
			r := w.f.roll(roll, n.name, op, key, itoa(attempt))
			switch {
			case r < 0.05:
				return FailBefore
			case r < 0.1:
				return LoseAnswer
			case r < 0.12:
				return Throttle
			case r < 0.17:
				return Slow
			}
			return NoFault
		}
	}
	return fs
}

// completionStall returns node n's pauses as it starts a store operation:
// one may land between a handler's return and its completion, the instant
// the completion's fencing exists for.
func (w *world) completionStall(n *node) func(op, key string) time.Duration {
	return func(op, key string) time.Duration {
		if op != "complete" || !w.on(Stall) || !w.f.chance(0.1, "stall-complete", n.name, key) || !n.pauseOnce() {
			return 0
		}
		w.j.inject("stall")
		d := w.f.dur(35*time.Second, 90*time.Second, "stall-complete-len", n.name, key)
		w.mark(time.Now().Add(d))
		return d
	}
}

// onceHandler is the handler of a user's Once function on node n: once.Do
// under the message's key on the node's client fs of the function's own
// claim table. The worker's claim on the key (in the worker's table) is
// held meanwhile; once's claim is the one the function's effect relies on.
func (w *world) onceHandler(n *node, fs *FaultyStore) worker.Handler {
	store := gatedStore{n: n, inner: fs, stallAt: w.completionStall(n)}
	return worker.HandlerFunc(func(ctx context.Context, m *worker.Message) (string, error) {
		return once.Do(ctx, store, m.Key, once.Options{Owner: n.name, Now: n.clock}, w.cfg.Once)
	})
}

// name is the key a message's history is kept under: its payment id, or
// its idempotency key for a user's workload.
func (w *world) name(m *worker.Message) string {
	if p, ok := m.Payload.(payment); ok {
		return p.ID
	}
	if !w.cfg.user() {
		var p payment
		if json.Unmarshal([]byte(m.Body), &p) == nil && p.ID != "" {
			return p.ID
		}
	}
	if m.Key != "" {
		return m.Key
	}
	return m.ID
}

// watch waits until the world has settled (everything sent, the source
// queue empty, poison dead-lettered, the dead-letter queue redriven once
// if valid messages are in it) or the drain bound passed.
func (w *world) watch() {
	redriveAt := time.Time{}
	for {
		time.Sleep(10 * time.Second)
		now := time.Now()
		quiet := now.After(w.lastFaultAt()) && (w.burst || now.After(w.start.Add(12*time.Minute)))
		src := w.sqs.Stats(w.src)
		if quiet && !w.redriven && src.Visible+src.InFlight == 0 && w.validInDLQ() > 0 {
			if redriveAt.IsZero() {
				redriveAt = now.Add(time.Minute)
			} else if now.After(redriveAt) {
				w.redrive()
				continue
			}
		}
		last := w.lastFaultAt()
		if w.redriven && redriveAt.After(last) {
			last = redriveAt
		}
		if quiet && src.Visible+src.InFlight == 0 && w.validInDLQ() == 0 && w.sqs.Stats(w.dlq).InFlight == 0 {
			w.drain = max(0, now.Sub(last))
			return
		}
		bound := drainBound
		if w.burst {
			bound = burstDrainBound
		}
		if now.Sub(last) > bound {
			w.j.violate("world", "the queue did not drain within %s of the last fault: %d visible, %d in flight, %d valid dead-lettered",
				bound, src.Visible, src.InFlight, w.validInDLQ())
			return
		}
	}
}

// validInDLQ counts the dead-letter queue's messages that are not poison.
func (w *world) validInDLQ() int {
	n := 0
	for _, m := range w.sqs.Messages(w.dlq) {
		if !w.isPoison(aws.ToString(m.Body)) {
			n++
		}
	}
	return n
}

func (w *world) isPoison(body string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.poison[body] {
		return true
	}
	var p payment
	if w.cfg.Body == nil && json.Unmarshal([]byte(published(body)), &p) == nil {
		return w.poison[p.ID]
	}
	return false
}

// redrive moves the dead-letter queue back, as an operator would with
// `worker redrive`, after checking that only a long outage put valid
// messages there.
func (w *world) redrive() {
	for _, m := range w.sqs.Messages(w.dlq) {
		body := aws.ToString(m.Body)
		if w.isPoison(body) {
			continue
		}
		name := body
		var p payment
		if json.Unmarshal([]byte(published(body)), &p) == nil && p.ID != "" {
			name = p.ID
		}
		// Receives spent by crashes, stalls, drains and duplicate
		// deliveries (SQS's or SNS's: a copy deferred behind its twin's
		// holder spends a receive each time it finds the key held) are
		// not the schedule's to cover: the check holds where only
		// dependency failures spent them.
		if w.kinds&(Crash|Stall|Drain|Duplicate|SNSDuplicate) == 0 && w.longestOutage() < outageCover-2*time.Minute {
			w.j.violate(name, "valid message %s dead-lettered (reason %q) though every outage ended within the %s cover",
				aws.ToString(m.MessageId), aws.ToString(m.MessageAttributes[worker.ReasonAttribute].StringValue), outageCover)
		}
		w.j.event(name, "oper", "redrive %s", aws.ToString(m.MessageId))
	}
	w.redriven = true
	w.j.inject("redrive")
	// Max: what is there now. Without it, Move also takes poison the
	// workers dead-letter again meanwhile, and moves it back for ever.
	n := len(w.sqs.Messages(w.dlq))
	if _, err := redrive.Move(context.Background(), w.sqs, w.src, w.dlq, redrive.Options{Max: n, Secret: originalIDSecret}); err != nil {
		w.j.violate("world", "redrive: %v", err)
	}
}

// check runs the invariants after the run.
func (w *world) check() *Result {
	r := &Result{Seed: w.cfg.Seed, Faults: w.kinds, FIFO: w.fifo, Burst: w.burst, Virtual: time.Since(w.start),
		Messages: w.sqs.Stats(w.src).Sent, Drain: w.drain, Store: w.store, Provider: w.provider, SQS: w.sqs,
		QueueURL: w.src, DeadLetterURL: w.dlq, j: w.j}
	for _, s := range w.store.Stale() {
		w.j.violate("world", "fencing: %s", s)
	}
	ledger := w.store.Ledger()
	if !w.cfg.user() {
		w.checkPayments(ledger)
	}
	// Poison ends dead-lettered, with its reason.
	dead := map[string]bool{}
	for _, m := range w.sqs.Messages(w.dlq) {
		body := aws.ToString(m.Body)
		if !w.isPoison(body) {
			continue
		}
		dead[body] = true
		if aws.ToString(m.MessageAttributes[worker.ReasonAttribute].StringValue) == "" {
			w.j.violate(body, "poison message %s dead-lettered without a reason", aws.ToString(m.MessageId))
		}
	}
	if src := w.sqs.Stats(w.src); src.Visible+src.InFlight > 0 {
		w.j.violate("world", "source queue not empty at the end: %d visible, %d in flight", src.Visible, src.InFlight)
	}
	w.mu.Lock()
	for _, p := range slices.Sorted(maps.Keys(w.poison)) {
		found := dead[p]
		for b := range dead {
			var pp payment
			if json.Unmarshal([]byte(published(b)), &pp) == nil && pp.ID == p {
				found = true
			}
		}
		if !found {
			w.j.violations = append(w.j.violations, violation{key: p, what: fmt.Sprintf("poison %s is not in the dead-letter queue", p)})
		}
	}
	w.mu.Unlock()
	if w.cfg.Check != nil {
		for _, v := range w.cfg.Check(r) {
			w.j.violate("check", "%s", v)
		}
	}
	w.j.report(r)
	return r
}

func (w *world) checkPayments(ledger []Applied) {
	entries := map[string][]Applied{}
	for _, a := range ledger {
		entries[a.Ref] = append(entries[a.Ref], a)
		if a.Entry.Token != a.Token {
			w.j.violate(a.Ref, "ledger entry written by token %d committed with the claim of token %d", a.Entry.Token, a.Token)
		}
	}
	w.mu.Lock()
	valid := slices.Sorted(maps.Keys(w.valid))
	poison := slices.Sorted(maps.Keys(w.poison))
	w.mu.Unlock()
	for _, p := range valid {
		if n := len(w.provider.Moved(p)); n != 1 {
			w.j.violate(p, "money moved %d times for payment %s", n, p)
		}
		if n := len(entries[p]); n != 1 {
			w.j.violate(p, "ledger entry applied %d times for payment %s", n, p)
		}
	}
	for _, p := range poison {
		if n := len(w.provider.Moved(p)) + len(entries[p]); n != 0 {
			w.j.violate(p, "poison payment %s had %d effects", p, n)
		}
	}
	if w.fifo && !w.redriven {
		last := map[string]int{}
		for _, a := range ledger {
			if s, ok := last[a.Account]; ok && a.Seq < s {
				w.j.violate(a.Ref, "FIFO group %s: payment %s (seq %d) applied after seq %d", a.Account, a.Ref, a.Seq, s)
			}
			last[a.Account] = a.Seq
		}
	}
}

// chargeFault is what the provider does with a charge of key at attempt
// while provider faults are on and window has not passed since the start:
// times out after charging (15%), refuses (5%), or charges.
func (w *world) chargeFault(f fate, key string, attempt int, window time.Duration) ProviderFault {
	if !w.on(ProviderTimeout) || time.Now().After(w.start.Add(window)) {
		return ChargeOK
	}
	r := f.roll("charge", key, itoa(attempt))
	switch {
	case r < 0.15:
		return ChargeTimeout
	case r < 0.2:
		return ChargeRefused
	}
	return ChargeOK
}

// slowCharges makes a quarter of the charges take from least to most
// while provider faults are on; the others take 200ms.
func (w *world) slowCharges(f fate, least, most time.Duration) {
	if !w.on(ProviderTimeout) {
		return
	}
	w.provider.Latency = func(key string, attempt int) time.Duration {
		if f.chance(0.25, "slow-charge", key, itoa(attempt)) {
			w.j.inject("provider_slow")
			return f.dur(least, most, "slow-charge-len", key, itoa(attempt))
		}
		return 200 * time.Millisecond
	}
}
