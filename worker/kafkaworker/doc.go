// Package kafkaworker is the Kafka transport of the worker protocol: a
// consumer-group member (github.com/twmb/franz-go) that runs each record
// through worker.Engine (decode, key, claim, handle, complete or release)
// and carries out its disposition with offsets and a dead-letter topic. A
// handler written for SQS runs unchanged; Message.Native is the
// *kgo.Record.
//
// # The commit rule
//
// Autocommit is off. A partition's committed offset is the end of its
// contiguous prefix of settled records: completed, a duplicate replayed,
// or dead-lettered with the dead-letter write acknowledged. A record that
// is not settled (running, retrying, waiting behind its key) holds back
// its partition's commit, never its other keys. Loss could only come from
// committing past an unsettled record; a rewind only makes replays, which
// the claims absorb. Commits go out every CommitInterval, at a revoke and
// at shutdown, and only for partitions this member owns.
//
// # Revoke and loss
//
// On a revoke the worker stops dispatching the revoked partitions and
// drops their queued records, waits up to RevokeGrace for the running
// ones, commits the settled prefix, forgets the partitions and returns:
// no commit of theirs leaves this member after the revoke callback
// returned (such a late commit is accepted by the broker and rewinds the
// new owner). Records still running finish under their claims, renewed
// as usual: the new owner finds their keys held, waits for the lease, then
// replays them as duplicates. Lost partitions (a session expired) are the
// same without the commit.
//
// # Leases, retries, dead letters
//
// Kafka has no visibility timeout: the claim's Lease stands alone, renewed
// every RenewInterval while the handler runs, and shorter than the
// session timeout so that a dead member's claims have ended when its
// partitions move. HoldFor is the watchdog kgo lacks: a claim is not
// renewed past it. A retryable failure is retried in process under the
// claim with backoff (Hold.HoldUntil, HoldFor); past HoldFor the claim is
// released and the record retried later, still in process and still
// holding its key's lane (there is no retry topic: it would give up the
// key's order). Poison, key reuse and permanent failures go to
// DeadLetterTopic (default "<topic>-dlt") with the original key, value and
// headers plus HeaderReason, HeaderAttempt, HeaderTopic, HeaderPartition,
// HeaderOffset, HeaderTimestamp and HeaderKey; the write is synchronous
// and acknowledged before the record counts as settled, and a failed
// write settles nothing and is retried.
//
// # Keys and order
//
// Records of one Kafka key within a partition run in order, one at a time;
// different keys of a partition run in parallel up to Concurrency (lanes);
// records without a key each run on their own. PartitionOrder runs a
// partition's records one at a time instead. The idempotency key is the
// Decoder's: give one that reads the business key (a payload field or a
// header). The default, worker.KeyFromMessageID, keys by Message.ID, which
// is "topic/partition/offset" here: it catches redeliveries, not a
// producer's retry, which lands at a new offset.
//
// Message.Attempt counts this member's deliveries of the record in this
// ownership of its partition (1 at the first); Message.Redelivered is
// Attempt > 1. Whether another member, or this one before a restart or a
// rebalance, delivered it already is unknowable from the record: the
// claim says it (a duplicate, or a key held elsewhere).
// Message.FirstReceived is this member's first fetch of it.
//
// # Retention
//
// New reads the topic's retention.ms (kadm) and refuses a claim Retention
// shorter than it plus HoldFor, Lease and RetentionMargin (Config.
// MinRetention); a Retention left zero defaults to that. A compacted
// topic, or one with retention.ms -1, keeps records without end: Retention
// must then be set explicitly.
//
// # Tests and kfake
//
// The transport is tested against franz-go's kfake run as its own process
// (emulator/kafka). kfake is not Kafka: it keeps everything in memory, has
// no replication or acks durability, no log truncation, and enforces no
// quotas; its classic group coordinator can wedge when a group's leader
// dies between JoinGroup and SyncGroup, which a real broker survives.
package kafkaworker
