package kafkaworker

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/claimfirst/claimfirst/internal/setting"
	"github.com/claimfirst/claimfirst/worker"
)

// Config configures a Worker.
type Config struct {
	// Protocol is the per-message protocol's settings (Store, Handler,
	// Decoder, Retention, ...), as for the other transports; its fields are
	// Config's too. Its Decoder defaults to worker.KeyFromMessageID, which
	// here keys a record by its offset (Message.ID is
	// "topic/partition/offset"): that catches a redelivery, not a
	// producer's retry, which lands at a new offset. Give a Decoder that
	// reads the business key instead.
	worker.Protocol
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// Topic is the topic consumed. Required.
	Topic string
	// Group is the consumer group. Required.
	Group string
	// DeadLetterTopic receives the dead letters. Defaults to Topic + "-dlt".
	DeadLetterTopic string
	// Concurrency is how many records are processed at once, at most
	// worker.MaxConcurrency. Defaults to 16.
	Concurrency int
	// PartitionOrder processes each partition's records one at a time, in
	// offset order. Defaults to false: records of one key (the record's
	// Kafka key) in order, different keys of a partition in parallel, and
	// records without a key each on their own.
	PartitionOrder bool
	// Lease is the claim's lease: how long a key stays held by this member
	// without a renewal. It must be shorter than SessionTimeout, so that a
	// dead member's claims have ended by the time its partitions move.
	// Defaults to a third of SessionTimeout.
	Lease time.Duration
	// RenewInterval is how often a running handler's claim is renewed.
	// Defaults to a third of Lease.
	RenewInterval time.Duration
	// SessionTimeout is the group session timeout: how long the group
	// waits for a silent member before it moves its partitions. Defaults
	// to 45s.
	SessionTimeout time.Duration
	// RebalanceTimeout is how long the group waits for its members to
	// rejoin during a rebalance. Defaults to 60s.
	RebalanceTimeout time.Duration
	// RevokeGrace is how long a revoke waits for the running records of
	// the revoked partitions before it commits their settled prefix and
	// returns; what still runs finishes under its claim. It must be shorter
	// than RebalanceTimeout. Defaults to half of RebalanceTimeout, at most
	// 10s.
	RevokeGrace time.Duration
	// CommitInterval is how often the settled prefixes are committed.
	// Defaults to 1s.
	CommitInterval time.Duration
	// HoldFor is how long a record whose step failed retryably is retried
	// in process under its claim (the partition's other keys go on) before
	// its claim is released; it is then retried later, still in process.
	// It also bounds a handler that never returns: its claim is not renewed
	// past it. Defaults to 15m.
	HoldFor time.Duration
	// MaxHoldBackoff caps the delay between in-process retries. Defaults
	// to 10s.
	MaxHoldBackoff time.Duration
	// BreakerThreshold is how many dependency failures in a row, with no
	// record completed between them, open the breaker: then one record at
	// a time is fetched, every ProbeInterval, until one completes. Defaults
	// to 5.
	BreakerThreshold int
	// ProbeInterval is the pause between fetches while the breaker is open.
	// Defaults to 2s.
	ProbeInterval time.Duration
	// MaxBuffered is how many fetched records may wait unsettled (running,
	// queued behind their key, or settled behind an unsettled one) before
	// fetching pauses. Defaults to 64 times Concurrency.
	MaxBuffered int
	// ShutdownTimeout bounds how long Run takes to return after its
	// context ends: running handlers get all of it but a quarter (at most
	// 5s), then their contexts are cancelled; at the end Run commits the
	// settled prefixes, leaves the group and returns, with
	// ErrShutdownTimeout if a handler still runs (its claim is renewed
	// until it returns; its record, not committed, is replayed by the next
	// owner). Defaults to 30s.
	ShutdownTimeout time.Duration
	// RetentionMargin is added to the topic's retention.ms (and HoldFor and
	// Lease) for the shortest claim Retention: it covers a producer's
	// retries and the clocks. Defaults to 1h.
	RetentionMargin time.Duration
	// ClientOptions are more franz-go options for the client, applied after
	// the worker's own (SASL, TLS, a Dialer, ...). Defaults to none.
	ClientOptions []kgo.Opt
}

// Defaults of Config's settings.
const (
	DefaultConcurrency      = 16
	DefaultSessionTimeout   = 45 * time.Second
	DefaultRebalanceTimeout = 60 * time.Second
	DefaultCommitInterval   = time.Second
	DefaultHoldFor          = 15 * time.Minute
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultRetentionMargin  = time.Hour
	DefaultBreakerThreshold = 5
	DefaultProbeInterval    = 2 * time.Second
	// DefaultMaxRetryBackoff is Protocol.MaxRetryBackoff's default here:
	// a record retried later waits in process, so not SQS's 12h.
	DefaultMaxRetryBackoff = 5 * time.Minute
)

// DeadLetterSuffix is appended to Topic for DeadLetterTopic's default.
const DeadLetterSuffix = "-dlt"

// setDefaults fills the fields that do not depend on the topic.
func (c *Config) setDefaults() {
	if c.DeadLetterTopic == "" && c.Topic != "" {
		c.DeadLetterTopic = c.Topic + DeadLetterSuffix
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if c.Lease == 0 {
		c.Lease = c.SessionTimeout / 3
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.Lease / 3
	}
	if c.RevokeGrace == 0 {
		c.RevokeGrace = min(c.RebalanceTimeout/2, 10*time.Second)
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.HoldFor == 0 {
		c.HoldFor = DefaultHoldFor
	}
	if c.MaxHoldBackoff == 0 {
		c.MaxHoldBackoff = 10 * time.Second
	}
	if c.BreakerThreshold == 0 {
		c.BreakerThreshold = DefaultBreakerThreshold
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = 64 * c.Concurrency
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.RetentionMargin == 0 {
		c.RetentionMargin = DefaultRetentionMargin
	}
	if c.MinRetryBackoff == 0 {
		c.MinRetryBackoff = time.Second
	}
	if c.MaxRetryBackoff == 0 {
		c.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
}

// CheckSettings validates c's settings (not its clients: Store, Handler)
// with their defaults, as New does before it connects, and without
// connecting: the binary checks its flags and environment with it. The
// errors are under worker.ErrConfig, one per field.
func (c Config) CheckSettings() error {
	c.setDefaults()
	return setting.Join(c.settingErrs()...)
}

func (c *Config) validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, &setting.Error{Field: "Store", Problem: "is required"})
	}
	if c.Handler == nil {
		errs = append(errs, &setting.Error{Field: "Handler", Problem: "is required"})
	}
	return setting.Join(append(errs, c.settingErrs()...)...)
}

// settingErrs are c's bad settings, defaults applied.
func (c *Config) settingErrs() []error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, &setting.Error{Field: "Brokers", Problem: "is required"})
	}
	if c.Topic == "" {
		errs = append(errs, &setting.Error{Field: "Topic", Problem: "is required"})
	}
	if c.Group == "" {
		errs = append(errs, &setting.Error{Field: "Group", Problem: "is required"})
	}
	if c.Topic != "" && c.DeadLetterTopic == c.Topic {
		errs = append(errs, fieldErr("DeadLetterTopic", c.DeadLetterTopic, "must not be Topic"))
	}
	if c.Concurrency < 1 || c.Concurrency > worker.MaxConcurrency {
		errs = append(errs, fieldErr("Concurrency", c.Concurrency, "must be 1 to %d", worker.MaxConcurrency))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"Lease", c.Lease}, {"RenewInterval", c.RenewInterval}, {"SessionTimeout", c.SessionTimeout},
		{"RebalanceTimeout", c.RebalanceTimeout}, {"RevokeGrace", c.RevokeGrace}, {"CommitInterval", c.CommitInterval},
		{"HoldFor", c.HoldFor}, {"MaxHoldBackoff", c.MaxHoldBackoff}, {"ProbeInterval", c.ProbeInterval},
		{"ShutdownTimeout", c.ShutdownTimeout}, {"RetentionMargin", c.RetentionMargin},
		{"MinRetryBackoff", c.MinRetryBackoff}, {"MaxRetryBackoff", c.MaxRetryBackoff},
	} {
		if f.d <= 0 {
			errs = append(errs, fieldErr(f.name, f.d, "must be positive"))
		}
	}
	if c.Retention < 0 {
		errs = append(errs, fieldErr("Retention", c.Retention, "must not be negative"))
	}
	if c.Lease >= c.SessionTimeout {
		errs = append(errs, fieldErr("Lease", c.Lease, "must be shorter than SessionTimeout %s, so that a dead member's claims end before its partitions move", c.SessionTimeout))
	}
	if c.RenewInterval >= c.Lease {
		errs = append(errs, fieldErr("RenewInterval", c.RenewInterval, "must be shorter than Lease %s", c.Lease))
	}
	if c.RevokeGrace >= c.RebalanceTimeout {
		errs = append(errs, fieldErr("RevokeGrace", c.RevokeGrace, "must be shorter than RebalanceTimeout %s", c.RebalanceTimeout))
	}
	if c.MaxRetryBackoff < c.MinRetryBackoff {
		errs = append(errs, fieldErr("MaxRetryBackoff", c.MaxRetryBackoff, "must not be less than MinRetryBackoff %s", c.MinRetryBackoff))
	}
	if c.BreakerThreshold < 1 {
		errs = append(errs, fieldErr("BreakerThreshold", c.BreakerThreshold, "must be at least 1"))
	}
	if c.Concurrency >= 1 && c.MaxBuffered < c.Concurrency {
		errs = append(errs, fieldErr("MaxBuffered", c.MaxBuffered, "must be at least Concurrency %d", c.Concurrency))
	}
	return errs
}

// MinRetention is the shortest claim retention for a topic that keeps
// records for topicRetention: a record, or a producer's retry of it, may
// be read until the topic drops it, then held and retried for HoldFor
// under a lease, and RetentionMargin covers the producer's retries and the
// clocks.
func (c *Config) MinRetention(topicRetention time.Duration) time.Duration {
	return topicRetention + c.HoldFor + c.Lease + c.RetentionMargin
}

// ErrRetention is what New returns, wrapped with the numbers, when the
// claims' Retention is shorter than the topic's retention requires, or
// the topic keeps records without end (compacted, retention.ms -1) and
// Retention was not set explicitly.
var ErrRetention = errors.New("kafkaworker: claim retention too short for the topic")

func fieldErr(field string, value any, format string, args ...any) *setting.Error {
	return &setting.Error{Field: field, Value: value, Problem: fmt.Sprintf(format, args...)}
}
