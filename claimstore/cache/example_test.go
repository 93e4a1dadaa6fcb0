package cache_test

import (
	"context"
	"fmt"
	"time"

	"github.com/claimfirst/claimfirst/claimstore/cache"
	"github.com/claimfirst/claimfirst/claimstore/memory"
	"github.com/claimfirst/claimfirst/once"
)

// A cache of completed keys in front of the claim store (in production,
// claimstore/dynamo): the repeats of a key this process completed cost no
// request to the store.
func ExampleNew() {
	store, err := cache.New(memory.New(memory.Config{}), cache.Config{Size: 10000, TTL: 5 * time.Minute})
	if err != nil {
		panic(err)
	}
	for range 3 {
		r, err := once.Run(context.Background(), store, "order-7", once.Options{}, func(context.Context, once.Call) (string, error) {
			return "charged", nil
		})
		fmt.Println(r.Value, r.Replayed, r.Cached, err)
	}
	fmt.Printf("%+v\n", store.Stats())
	// Output:
	// charged false false <nil>
	// charged true true <nil>
	// charged true true <nil>
	// {Hits:2 Misses:1}
}
