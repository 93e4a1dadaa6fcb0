package sim

import (
	"hash/fnv"
	"strconv"
	"time"
)

// fate decides every random thing in a run from the seed and the identity
// of the decision (what, which message, which attempt), never from a
// shared random stream: a schedule replays whatever order goroutines run in.
type fate uint64

// roll returns a number in [0, 1) for the decision named by parts.
func (f fate) roll(parts ...string) float64 {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(uint64(f) >> (8 * i))
	}
	_, _ = h.Write(b[:])
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	x := h.Sum64()
	// splitmix64 finalizer: FNV's low bits alone are poorly mixed.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / float64(1<<53)
}

// chance reports whether the decision named by parts happens with probability p.
func (f fate) chance(p float64, parts ...string) bool { return f.roll(parts...) < p }

// intn returns an integer in [lo, hi].
func (f fate) intn(lo, hi int, parts ...string) int {
	return lo + int(f.roll(parts...)*float64(hi-lo+1))
}

// dur returns a duration in [lo, hi], whole milliseconds.
func (f fate) dur(lo, hi time.Duration, parts ...string) time.Duration {
	ms := f.intn(int(lo/time.Millisecond), int(hi/time.Millisecond), parts...)
	return time.Duration(ms) * time.Millisecond
}

func itoa(i int) string { return strconv.Itoa(i) }
