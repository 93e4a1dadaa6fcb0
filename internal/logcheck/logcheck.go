// Package logcheck is a slog.Handler for tests that finds log attributes a
// JSON handler would write badly: a time.Duration, which slog's JSON
// handler writes as a bare integer of nanoseconds ("visible_in":27967292971).
// Log lines carry durations as Go duration strings ("28s").
package logcheck

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Handler passes records to the handler it wraps and records every
// attribute, nested or added by With, whose value is a duration.
type Handler struct {
	next   slog.Handler
	found  *found
	prefix string // the groups opened by WithGroup, dotted
	with   []string
}

type found struct {
	mu    sync.Mutex
	lines []string
}

// New returns a Handler passing records on to next; nil: to none.
func New(next slog.Handler) *Handler {
	if next == nil {
		next = slog.DiscardHandler
	}
	return &Handler{next: next, found: &found{}}
}

// Durations returns the attributes logged as durations, each as
// "message: key=value".
func (h *Handler) Durations() []string {
	h.found.mu.Lock()
	defer h.found.mu.Unlock()
	return append([]string(nil), h.found.lines...)
}

// Enabled reports true: every level is checked.
func (h *Handler) Enabled(context.Context, slog.Level) bool { return true }

// Handle checks r's attributes and passes r on when next is enabled.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	bad := append([]string(nil), h.with...)
	r.Attrs(func(a slog.Attr) bool {
		bad = append(bad, durations(h.prefix, a)...)
		return true
	})
	if len(bad) > 0 {
		h.found.mu.Lock()
		for _, b := range bad {
			h.found.lines = append(h.found.lines, r.Message+": "+b)
		}
		h.found.mu.Unlock()
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(attrs)
	c.with = append([]string(nil), h.with...)
	for _, a := range attrs {
		c.with = append(c.with, durations(h.prefix, a)...)
	}
	return &c
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	c.prefix = h.prefix + name + "."
	return &c
}

// durations returns a's durations, a's groups walked, LogValuers resolved.
func durations(prefix string, a slog.Attr) []string {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindDuration:
		return []string{fmt.Sprintf("%s%s=%s", prefix, a.Key, v.Duration())}
	case slog.KindGroup:
		var out []string
		for _, g := range v.Group() {
			out = append(out, durations(prefix+a.Key+".", g)...)
		}
		return out
	case slog.KindAny:
		if d, ok := v.Any().(time.Duration); ok {
			return []string{fmt.Sprintf("%s%s=%s", prefix, a.Key, d)}
		}
	}
	return nil
}
