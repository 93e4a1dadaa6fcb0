// Package plant carries faults planted on purpose into the real code of a
// transport, for the tests that must catch them: the simulator's Kafka
// mutants (package sim) and the transport's own tests. A plant travels in
// the context given to the transport's constructor, which reads it once;
// nothing outside this module can import the package, so no user can set
// one, and the transport's exported API does not change.
package plant

import "context"

// Kafka are the faults worker/kafkaworker can be built with.
type Kafka struct {
	// CommitPastUnsettled moves a partition's commit past the unsettled
	// records before a settled one (commit before settle).
	CommitPastUnsettled bool
	// CommitAfterRevoke lets a revoked partition whose records still run
	// at the end of the revoke's grace stay committable: when they settle,
	// this member commits the partition's prefix after its revoke callback
	// returned, over the new owner's commits.
	CommitAfterRevoke bool
}

type kafkaKey struct{}

// WithKafka returns ctx carrying the Kafka faults k.
func WithKafka(ctx context.Context, k Kafka) context.Context {
	return context.WithValue(ctx, kafkaKey{}, k)
}

// KafkaFrom returns the Kafka faults ctx carries: none by default.
func KafkaFrom(ctx context.Context) Kafka {
	k, _ := ctx.Value(kafkaKey{}).(Kafka)
	return k
}
