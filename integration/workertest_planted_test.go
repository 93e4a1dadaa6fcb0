package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/internal/awstest"
	"github.com/claimfirst/claimfirst/worker"
	"github.com/claimfirst/claimfirst/worker/workertest"
)

// TestWorkertestPlantedFaults shows that every scenario of the door
// contract can fail: each runs against the long-poll transport with a
// fault planted in it (in its claim store, handler chain, decoder or
// producer side), every capability declared present, and must fail. A
// scenario that passes against its fault proves nothing.
func TestWorkertestPlantedFaults(t *testing.T) {
	awstest.Config(t) // skips without the emulator
	t.Parallel()
	runPlanted(t, plantedFaults(), func(t workertest.T, o workertest.Options) workertest.Harness {
		return newLongPollDoor(t, o)
	})
}

// runPlanted runs each fault's scenario against the harnesses newHarness
// makes, with the fault planted and every capability declared present:
// each must fail.
func runPlanted(t *testing.T, faults []plantedFault, newHarness workertest.NewHarness) {
	for _, c := range faults {
		t.Run(c.scenario, func(t *testing.T) {
			t.Parallel()
			var sc workertest.Scenario
			for _, s := range workertest.Scenarios() {
				if s.Name == c.scenario {
					sc = s
				}
			}
			if sc.Run == nil {
				t.Fatalf("no scenario %s", c.scenario)
			}
			planted := func(t workertest.T, o workertest.Options) workertest.Harness {
				m := &plantedDoor{Harness: newHarness(t, o)}
				c.plant(m)
				return m
			}
			r := workertest.Check(t, c.scenario, planted, sc.Options, sc.Run)
			switch {
			case r.Skipped != "":
				t.Errorf("%s skipped against %q: %s", c.scenario, c.fault, r.Skipped)
			case !r.Failed():
				t.Errorf("%s passed against %q: it cannot see that fault", c.scenario, c.fault)
			default:
				t.Logf("%s caught %q:\n%s", c.scenario, c.fault, r)
			}
		})
	}
}

// plantedFault is a scenario and the fault it must catch.
type plantedFault struct {
	scenario string
	fault    string
	plant    func(m *plantedDoor)
}

func plantedFaults() []plantedFault {
	return []plantedFault{
		{"DuplicateWhileRunning", "a key held elsewhere is taken over at once (two runs at a time)", func(m *plantedDoor) {
			m.store = func(s claimstore.Store) claimstore.Store {
				return &stealingStore{Store: s, admin: m.Store().(claimstore.Admin)}
			}
		}},
		{"CrashBeforeAck", "completing writes nothing (acks before the claim is completed)", func(m *plantedDoor) {
			m.store = func(s claimstore.Store) claimstore.Store { return noCompleteStore{s} }
		}},
		{"FailureThenSuccess", "a handler failure is taken for success", func(m *plantedDoor) {
			m.handler = func(h worker.Handler) worker.Handler {
				return worker.HandlerFunc(func(ctx context.Context, msg *worker.Message) (string, error) {
					res, _ := h.Handle(ctx, msg)
					return res, nil
				})
			}
		}},
		{"Poison", "an undecodable body is keyed by its hash and handled", func(m *plantedDoor) {
			m.decoder = func(d worker.Decoder) worker.Decoder {
				return worker.DecoderFunc(func(msg *worker.Message) error {
					if err := d.Decode(msg); err != nil {
						sum := sha256.Sum256([]byte(msg.Body))
						msg.Key, msg.Payload = hex.EncodeToString(sum[:8]), workertest.Body{}
					}
					return nil
				})
			}
		}},
		{"KeyReused", "fingerprints are not stored (a reuse is a duplicate)", func(m *plantedDoor) {
			m.store = func(s claimstore.Store) claimstore.Store { return noFingerprintStore{s} }
		}},
		{"ResultTooLarge", "a result too large to store is a store error (the message is left)", func(m *plantedDoor) {
			m.store = func(s claimstore.Store) claimstore.Store { return largeResultFailsStore{s} }
		}},
		{"RenewalBlip", "a failed renewal is taken for a lost lease", func(m *plantedDoor) {
			m.store = func(s claimstore.Store) claimstore.Store { return renewErrorIsLossStore{s} }
		}},
		{"ShutdownOverrun", "renewals end with the handler's context (a handler abandoned at shutdown runs on without its claim)", func(m *plantedDoor) {
			cut := new(atomic.Bool)
			m.handler = func(h worker.Handler) worker.Handler {
				return worker.HandlerFunc(func(ctx context.Context, msg *worker.Message) (string, error) {
					stop := context.AfterFunc(ctx, func() { cut.Store(true) })
					defer stop()
					return h.Handle(ctx, msg)
				})
			}
			m.store = func(s claimstore.Store) claimstore.Store { return renewsEndStore{s, cut} }
		}},
		{"LostAck", "completing writes nothing (the redelivery runs again)", func(m *plantedDoor) {
			m.store = func(s claimstore.Store) claimstore.Store { return noCompleteStore{s} }
		}},
		{"StoreOutage", "a store error is taken for a bad key (poison)", func(m *plantedDoor) {
			m.store = func(s claimstore.Store) claimstore.Store { return storeErrorIsPoisonStore{s} }
		}},
		{"BrokerOutage", "messages received after a broker outage are acked without their work", func(m *plantedDoor) {
			m.handler = func(h worker.Handler) worker.Handler {
				return worker.HandlerFunc(func(ctx context.Context, msg *worker.Message) (string, error) {
					if m.outageSeen.Load() && !m.outageOn.Load() {
						return "skipped", nil
					}
					return h.Handle(ctx, msg)
				})
			}
		}},
		{"Ordering", "each message is sent in a group of its own, or (RabbitMQ) many delivered at once: order is lost", func(m *plantedDoor) {
			m.splitGroups = true
			if d, ok := m.Harness.(*rabbitDoor); ok {
				d.ordered = false // a queue keeps its order only to a consumer with one delivery in flight
			}
		}},
	}
}

// plantedDoor is a transport's harness with a fault planted, and every
// capability declared present.
type plantedDoor struct {
	workertest.Harness
	store       func(claimstore.Store) claimstore.Store
	handler     func(worker.Handler) worker.Handler
	decoder     func(worker.Decoder) worker.Decoder
	splitGroups bool
	outageOn    atomic.Bool
	outageSeen  atomic.Bool
	sent        atomic.Int64
}

func (m *plantedDoor) Absent(workertest.Capability) string { return "" }

func (m *plantedDoor) Start(ctx context.Context, p worker.Protocol) (workertest.Consumer, error) {
	if m.store != nil {
		p.Store = m.store(p.Store)
	}
	if m.handler != nil {
		p.Handler = m.handler(p.Handler)
	}
	if m.decoder != nil {
		p.Decoder = m.decoder(p.Decoder)
	}
	return m.Harness.Start(ctx, p)
}

func (m *plantedDoor) Send(ctx context.Context, msg workertest.Message) error {
	if m.splitGroups && msg.Group != "" {
		msg.Group = fmt.Sprintf("%s-%d", msg.Group, m.sent.Add(1))
	}
	return m.Harness.Send(ctx, msg)
}

func (m *plantedDoor) BrokerOutage(on bool) error {
	m.outageOn.Store(on)
	if on {
		m.outageSeen.Store(true)
	}
	return m.Harness.BrokerOutage(on)
}

// stealingStore takes a key held elsewhere over at once.
type stealingStore struct {
	claimstore.Store
	admin claimstore.Admin
}

func (s *stealingStore) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	a, err := s.Store.Acquire(ctx, p)
	if err == nil && a.Outcome == claimstore.HeldElsewhere {
		if _, err := s.admin.ForceRelease(ctx, p.Key); err != nil {
			return a, err
		}
		return s.Store.Acquire(ctx, p)
	}
	return a, err
}

// noCompleteStore answers every Complete with success and writes nothing.
type noCompleteStore struct{ claimstore.Store }

func (noCompleteStore) Complete(context.Context, claimstore.CompleteParams) error { return nil }

// renewsEndStore stops renewing once cut is set (a handler's context
// ended): every Renew then says the lease is lost and writes nothing, so
// the heartbeat stops, as it did when it shared the handlers' context.
type renewsEndStore struct {
	claimstore.Store
	cut *atomic.Bool
}

func (s renewsEndStore) Renew(ctx context.Context, p claimstore.RenewParams) error {
	if s.cut.Load() {
		return claimstore.ErrLeaseLost
	}
	return s.Store.Renew(ctx, p)
}

// noFingerprintStore claims every key without its fingerprint.
type noFingerprintStore struct{ claimstore.Store }

func (s noFingerprintStore) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	p.Fingerprint = ""
	return s.Store.Acquire(ctx, p)
}

// largeResultFailsStore fails a Complete whose result is too large with a
// plain store error instead of ErrResultTooLarge.
type largeResultFailsStore struct{ claimstore.Store }

func (s largeResultFailsStore) Complete(ctx context.Context, p claimstore.CompleteParams) error {
	if len(p.Result) > claimstore.MaxResultBytes {
		return errors.New("planted: the store failed")
	}
	return s.Store.Complete(ctx, p)
}

// renewErrorIsLossStore reports every failed Renew as a lost lease.
type renewErrorIsLossStore struct{ claimstore.Store }

func (s renewErrorIsLossStore) Renew(ctx context.Context, p claimstore.RenewParams) error {
	if err := s.Store.Renew(ctx, p); err != nil {
		return fmt.Errorf("planted: %w (%w)", claimstore.ErrLeaseLost, err)
	}
	return nil
}

// storeErrorIsPoisonStore reports a failed Acquire as an invalid key.
type storeErrorIsPoisonStore struct{ claimstore.Store }

func (s storeErrorIsPoisonStore) Acquire(ctx context.Context, p claimstore.AcquireParams) (claimstore.Acquisition, error) {
	a, err := s.Store.Acquire(ctx, p)
	if err != nil && !strings.Contains(err.Error(), claimstore.ErrInvalidKey.Error()) {
		return a, fmt.Errorf("planted: %w (%w)", claimstore.ErrInvalidKey, err)
	}
	return a, err
}

// TestWorkertestPlantedFaultsRabbit runs the planted faults against the
// RabbitMQ harness: each scenario must see its fault there too, or the
// RabbitMQ transport's pass of the door contract proves less than the long
// poll's.
func TestWorkertestPlantedFaultsRabbit(t *testing.T) {
	u := amqpURL(t)
	t.Parallel()
	var n atomic.Int64
	runPlanted(t, plantedFaults(), func(t workertest.T, o workertest.Options) workertest.Harness {
		d := newRabbitDoor(t, u, fmt.Sprintf("planted-%d-%d", time.Now().UnixNano(), n.Add(1)))
		d.ordered = o.Ordered
		return d
	})
}

// TestWorkertestPlantedFaultsKafka is the same against the Kafka harness.
func TestWorkertestPlantedFaultsKafka(t *testing.T) {
	brokers := kafkaBrokers(t)
	t.Parallel()
	runPlanted(t, plantedFaults(), func(t workertest.T, _ workertest.Options) workertest.Harness {
		return newKafkaDoor(t, brokers)
	})
}
