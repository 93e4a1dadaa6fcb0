package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// SweepParams bound a Sweep.
type SweepParams struct {
	// Batch is how many rows one DELETE removes at most: each batch is its
	// own short transaction, so the sweep never holds many row locks nor
	// stalls the claims running beside it. Defaults to 1000.
	Batch int
	// MaxRows stops the sweep after this many rows. Defaults to 0: until no
	// row past its expiry is left.
	MaxRows int64
}

// DefaultSweepBatch is SweepParams.Batch's default.
const DefaultSweepBatch = 1000

// Sweep deletes the rows past their expiry, in batches of p.Batch, oldest
// first through the expires_at index, and returns how many it deleted.
// PostgreSQL has no TTL: without a sweep, the table keeps every key it was
// ever given. Rows past their expiry already count as absent to the
// protocol, so deleting them changes no outcome; a row a takeover is
// writing at that moment is skipped.
func (s *Store) Sweep(ctx context.Context, p SweepParams) (int64, error) {
	if p.Batch <= 0 {
		p.Batch = DefaultSweepBatch
	}
	if p.MaxRows < 0 {
		return 0, errors.New("sweep: MaxRows must not be negative")
	}
	var deleted int64
	for {
		n := int64(p.Batch)
		if p.MaxRows > 0 && p.MaxRows-deleted < n {
			n = p.MaxRows - deleted
		}
		if n == 0 {
			return deleted, nil
		}
		now, _ := s.clock()
		tag, err := s.exec(ctx, s.cfg.DB, s.sql.sweep, n, now)
		if err != nil {
			return deleted, fmt.Errorf("sweep %s: %w", s.cfg.Table, err)
		}
		deleted += tag.RowsAffected()
		if tag.RowsAffected() < n {
			return deleted, nil
		}
	}
}

// Log keys of the sweeper's lines.
const (
	logKeyTable   = "table"
	logKeyDeleted = "deleted"
	logKeyElapsed = "elapsed"
)

// SweepEvery runs Sweep every interval until ctx is done, logging each
// sweep that deleted rows and each that failed (the next one retries).
func (s *Store) SweepEvery(ctx context.Context, interval time.Duration, p SweepParams, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		n, err := s.Sweep(ctx, p)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("claim sweep failed; the next one retries", slog.String(logKeyTable, s.cfg.Table),
				slog.Int64(logKeyDeleted, n), slog.Any("error", err))
		case n > 0:
			log.Info("claim sweep", slog.String(logKeyTable, s.cfg.Table), slog.Int64(logKeyDeleted, n),
				slog.String(logKeyElapsed, time.Since(start).String()))
		}
	}
}
