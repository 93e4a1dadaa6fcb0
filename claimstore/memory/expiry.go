package memory

import (
	"errors"
	"fmt"
	"time"
)

// ErrFull means the store holds Config.MaxClaims live claims: a new key
// cannot be claimed until some expire.
var ErrFull = errors.New("memory: store full")

// minSweep is the row count below which expired rows are left in place.
const minSweep = 1024

// Len returns the number of rows the store holds, live or expired but not
// yet dropped.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.claims)
}

// makeRoom makes room for one new row, with s.mu held. Expired rows are
// dropped each time the table has doubled since the last sweep (so a sweep
// costs O(1) per insert, amortized), and whenever the table is full; a
// full table of live rows refuses the row.
func (s *Store) makeRoom(now time.Time) error {
	full := s.maxClaims > 0 && len(s.claims) >= s.maxClaims
	if !full && len(s.claims) < s.sweepAt {
		return nil
	}
	for k, c := range s.claims {
		if !c.Live(now) {
			delete(s.claims, k)
		}
	}
	s.sweepAt = max(2*len(s.claims), minSweep)
	if s.maxClaims > 0 && len(s.claims) >= s.maxClaims {
		return fmt.Errorf("%w: %d live claims, MaxClaims %d", ErrFull, len(s.claims), s.maxClaims)
	}
	return nil
}
