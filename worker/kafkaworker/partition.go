package kafkaworker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// partition is one owned partition, for one ownership: from its
// assignment to its revoke or loss (a partition assigned again is a new
// partition).
type partition struct {
	tp
	stop    chan struct{} // closed when the partition stops: revoked, lost, shutdown
	stopped bool          // stop closed; under Worker.mu
	gone    bool          // no longer committed; under Worker.mu
	next    int64         // the next offset expected; earlier ones are stale fetches
	// pending are the records fetched and not yet in the committed prefix,
	// in offset order.
	pending []*entry
	// commit is the end of the settled prefix: the offset to commit (0
	// epoch -1 before any settles).
	commit    kgo.EpochOffset
	committed int64 // the last offset committed; -1 none
	lanes     map[string]*lane
	running   sync.WaitGroup // records of this partition being processed
}

// entry is one fetched record.
type entry struct {
	rec     *kgo.Record
	settled bool
	attempt int       // deliveries so far, in this process
	first   time.Time // the first delivery's start
}

// lane is the queue of one key's records within a partition. A lane is
// busy from the moment it has a record to run until its queue is empty:
// queued on Worker.ready, processing its head record, or waiting out
// that record's retry delay (retry), so that one key's records run one at
// a time and in order.
type lane struct {
	p     *partition
	key   string
	queue []*entry
	busy  bool
	retry *time.Timer // set while the head record waits to be retried
}

func newPartition(t tp) *partition {
	return &partition{tp: t, stop: make(chan struct{}), lanes: map[string]*lane{},
		commit: kgo.EpochOffset{Epoch: -1, Offset: -1}, committed: -1}
}

// halt stops dispatching p's records: queued ones are dropped, running
// ones go on; under Worker.mu.
func (p *partition) halt() {
	if p.stopped {
		return
	}
	p.stopped = true
	close(p.stop)
	for _, l := range p.lanes {
		l.queue = nil
		if l.retry != nil {
			l.retry.Stop()
			l.retry = nil
		}
	}
}

// assigned starts the partitions given to this member.
func (w *Worker) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for topic, parts := range m {
		for _, part := range parts {
			t := tp{topic, part}
			if old := w.parts[t]; old != nil {
				// Not revoked in between (a lost session with no callback):
				// the old ownership ends here, uncommitted.
				old.halt()
				old.gone = true
				w.buffered -= len(old.pending)
			}
			w.parts[t] = newPartition(t)
		}
	}
	w.log.Info("partitions assigned", slog.Any("partitions", m))
}

// revoked stops the revoked partitions, waits up to RevokeGrace for their
// running records, commits their settled prefixes and forgets them: after
// it returns nothing of theirs is committed by this member.
func (w *Worker) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	w.release(m, true)
}

// lost is revoked without the commit: the partitions may be another
// member's already.
func (w *Worker) lost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	w.release(m, false)
}

func (w *Worker) release(m map[string][]int32, commit bool) {
	w.mu.Lock()
	var parts []*partition
	for topic, ps := range m {
		for _, part := range ps {
			if p := w.parts[tp{topic, part}]; p != nil && !p.gone {
				p.halt()
				parts = append(parts, p)
			}
		}
	}
	w.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	done := make(chan struct{})
	go func() {
		for _, p := range parts {
			p.running.Wait()
		}
		close(done)
	}()
	t := time.NewTimer(w.cfg.RevokeGrace)
	finished := true
	select {
	case <-done:
	case <-t.C:
		finished = false
		w.log.Warn("revoke grace over: records still running finish under their claims; the next owner finds their keys held and waits",
			slog.String("revoke_grace", w.cfg.RevokeGrace.String()))
	}
	t.Stop()
	w.commitMu.Lock()
	defer w.commitMu.Unlock()
	if commit {
		ctx, cancel := context.WithTimeout(context.Background(), max(time.Second, w.cfg.RebalanceTimeout-w.cfg.RevokeGrace)/2)
		if err := w.commitLocked(ctx, parts); err != nil {
			w.log.Warn("commit at revoke failed: the next owner replays the settled records as duplicates", slog.Any("error", err))
		}
		cancel()
	}
	if !w.commitAfterRevoke || !commit || finished {
		w.dropAll(parts)
	}
	if commit {
		w.log.Info("partitions revoked", slog.Any("partitions", m))
	} else {
		w.log.Warn("partitions lost: nothing committed; the next owner replays from the last commit", slog.Any("partitions", m))
	}
}

// dropAll forgets parts: nothing of theirs is committed after; under
// commitMu.
func (w *Worker) dropAll(parts []*partition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range parts {
		p.halt()
		if p.gone {
			continue
		}
		p.gone = true
		w.buffered -= len(p.pending)
		p.pending = nil
		if w.parts[p.tp] == p {
			delete(w.parts, p.tp)
		}
	}
	select {
	case w.space <- struct{}{}:
	default:
	}
}

// commitLoop commits the owned partitions' settled prefixes every
// CommitInterval until ctx ends.
func (w *Worker) commitLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.commitMu.Lock()
		w.mu.Lock()
		parts := make([]*partition, 0, len(w.parts))
		for _, p := range w.parts {
			parts = append(parts, p)
		}
		w.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, max(w.cfg.CommitInterval, 5*time.Second))
		if err := w.commitLocked(cctx, parts); err != nil && ctx.Err() == nil {
			w.log.Warn("commit failed; retried at the next interval", slog.Any("error", err))
		}
		cancel()
		w.commitMu.Unlock()
	}
}

// commitLocked commits the settled prefix of each of parts still owned
// that moved since its last commit; under commitMu, so that it never runs
// after a revoke forgot them.
func (w *Worker) commitLocked(ctx context.Context, parts []*partition) error {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	w.mu.Lock()
	for _, p := range parts {
		if p.gone || p.commit.Offset <= p.committed {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[p.topic][p.part] = p.commit
	}
	w.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	var errs []error
	w.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					errs = append(errs, err)
					continue
				}
				if eo, ok := offsets[t.Topic][rp.Partition]; ok {
					for _, p := range parts {
						if p.topic == t.Topic && p.part == rp.Partition && eo.Offset > p.committed {
							p.committed = eo.Offset
						}
					}
				}
			}
		}
	})
	return errors.Join(errs...)
}
