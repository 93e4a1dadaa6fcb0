package memory_test

import (
	"testing"

	"github.com/claimfirst/claimfirst/claimstore"
	"github.com/claimfirst/claimfirst/claimstore/claimstoretest"
	"github.com/claimfirst/claimfirst/claimstore/memory"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	claimstoretest.Run(t, "memory", func(t *testing.T, clock *claimstoretest.Clock) claimstore.Store {
		return memory.New(memory.Config{Now: clock.Now, KeyPrefix: "svc#"})
	}, claimstoretest.Options{KeyPrefix: "svc#", Prefixed: func(t *testing.T, clock *claimstoretest.Clock, prefix string) claimstore.Store {
		return memory.New(memory.Config{Now: clock.Now, KeyPrefix: prefix}) // each memory store is its own space
	}})
}
