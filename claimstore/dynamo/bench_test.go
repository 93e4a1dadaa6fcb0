package dynamo_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/claimfirst/claimfirst/claimstore"
)

// BenchmarkAcquireComplete measures one message's claim traffic, an acquire
// and a complete in sequence, and the CPU time it costs this process
// (user+system, including the HTTP round trips to the emulator, which opens
// a new connection for every request).
func BenchmarkAcquireComplete(b *testing.B) {
	s := newStore(b, client(b, nil), time.Now)
	ctx := context.Background()
	prefix := fmt.Sprintf("bench-%d-", time.Now().UnixNano())
	cpu0 := cpu()
	i := 0
	for b.Loop() {
		now := time.Now()
		key := fmt.Sprint(prefix, i)
		i++
		a, err := s.Acquire(ctx, claimstore.AcquireParams{Key: key, Owner: "bench", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		if err != nil || a.Outcome != claimstore.Acquired {
			b.Fatalf("acquire: %v %v", a.Outcome, err)
		}
		if err := s.Complete(ctx, claimstore.CompleteParams{Holder: a.Claim.Holder(), Result: "ok", ExpiresAt: now.Add(time.Hour)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpu()-cpu0).Microseconds())/float64(b.N), "cpu-µs/msg")
}

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
