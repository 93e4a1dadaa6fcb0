package worker

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkProcess is the worker's own CPU per message, without any I/O:
// decode, claim, handle, complete on the memory store. What a message costs
// in all is this plus its AWS requests (see BenchmarkWorker in integration/).
func BenchmarkProcess(b *testing.B) {
	f := newFixture(ok("ch_1"))
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m := &Message{ID: "m" + strconv.Itoa(i), Body: "{}", Attempt: 1}
		i++
		if d := f.p.process(ctx, m, f.lease()); d.Action != Ack {
			b.Fatalf("action %v", d.Action)
		}
	}
}
