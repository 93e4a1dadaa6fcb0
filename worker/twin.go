package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/claimfirst/claimfirst/once"
)

// flights are the keys the deliveries of one engine hold, so that a
// duplicate of a key held in the same process waits for its twin there
// rather than for the twin's lease to end. Across processes nothing
// changes: a key held elsewhere is deferred until its lease ends.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// flight is one delivery holding a key with a token; done is closed when
// it completed or released the key (or lost it).
type flight struct {
	token int64
	done  chan struct{}
}

// start records that a delivery holds key with token, until finish.
func (f *flights) start(key string, token int64) *flight {
	fl := &flight{token: token, done: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[string]*flight)
	}
	f.m[key] = fl
	return fl
}

// finish records that fl no longer holds key and wakes its duplicates.
func (f *flights) finish(key string, fl *flight) {
	f.mu.Lock()
	if f.m[key] == fl {
		delete(f.m, key)
	}
	f.mu.Unlock()
	close(fl.done)
}

// holder returns the delivery of this process holding key with token, or nil.
func (f *flights) holder(key string, token int64) *flight {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.m[key]; fl != nil && fl.token == token {
		return fl
	}
	return nil
}

// awaitTwin waits for the delivery of this process that holds m's key, as
// held found it, to finish: no longer than the holder's lease as found
// and m's own lease (l.Until), and not once ctx ends or the transport
// stops. It reports whether to claim the key again: the holder finished
// (the key is completed, or released for m to take over) or its lease
// as found ended (renewed, or over). False: the holder is not in this
// process (after one more claim if it was, and finished since), or m
// cannot wait longer; m is deferred as a key held elsewhere.
func (p *processor) awaitTwin(ctx context.Context, log *slog.Logger, m *Message, held *once.HeldError, l *lease) bool {
	fl := p.flights.holder(m.Key, held.Token)
	if fl == nil {
		// A holder of this process may have finished since the store
		// answered: claim once more rather than wait out its lease.
		again := held.Owner == p.owner && !l.twinGone
		l.twinGone = true
		return again
	}
	until := held.Until
	if l.Until.Before(until) {
		until = l.Until
	}
	wait := until.Sub(p.now())
	if wait <= 0 {
		return false
	}
	log.Info("duplicate: key held by a delivery in this process; waiting for it", slog.String("holder", held.Owner),
		slog.Int64("token", held.Token), slog.String("wait_at_most", wait.String()))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-fl.done:
		return true
	case <-t.C:
		return p.now().Before(l.Until)
	case <-ctx.Done():
		return false
	case <-l.Stop:
		return false
	}
}
