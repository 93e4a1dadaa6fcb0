package demo

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

const (
	progressAfter = 3 * time.Second
	progressEvery = 10 * time.Second
)

// progress reports the running row and how far it got, for runs long enough
// (a DynamoDB table, many payments) that silence would look like a hang. A nil
// *progress reports nothing. Its lines and the tables are written under one
// lock (see write), so that on a terminal, where both streams meet, a
// progress line never lands inside a table.
type progress struct {
	w     io.Writer
	begin time.Time
	out   sync.Mutex // held while a line or a table is written

	mu    sync.Mutex
	label string
	total int
	done  atomic.Int64
}

func newProgress(w io.Writer) *progress { return &progress{w: w, begin: time.Now()} }

// row starts counting the receives of a row that expects about total of them.
func (p *progress) row(label string, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.label, p.total = label, total
	p.done.Store(0)
	p.mu.Unlock()
}

// receive counts one handled delivery.
func (p *progress) receive() {
	if p != nil {
		p.done.Add(1)
	}
}

// start prints a line after `after` and then every `every` until the
// returned stop is called; stop waits for the printing goroutine to end.
func (p *progress) start(after, every time.Duration) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTimer(after)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				p.print()
				t.Reset(every)
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
	}
}

// write runs f, which writes output, while no progress line is written, and
// then stops reporting the row that was running: its table is out.
func (p *progress) write(f func() error) error {
	if p == nil {
		return f()
	}
	p.out.Lock()
	defer p.out.Unlock()
	p.row("", 0)
	return f()
}

func (p *progress) print() {
	p.mu.Lock()
	label, total := p.label, p.total
	p.mu.Unlock()
	if label == "" {
		return
	}
	p.out.Lock()
	defer p.out.Unlock()
	fmt.Fprintf(p.w, "demo: %s: %d of about %d deliveries handled (%s so far)\n",
		label, p.done.Load(), total, time.Since(p.begin).Round(time.Second))
}
