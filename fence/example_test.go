package fence_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/fence"
)

// A fenced write refuses a stale worker. Two claims of one job run in
// turn: the worker of generation 1 paused (a long GC, a partition), lost
// its lease, and the job was claimed again as generation 2. Once the
// newer claim has written, the older one's late write is refused.
func ExampleRedis_HSet() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	f, err := fence.NewRedis(rdb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	// In a handler, the token is fence.TokenOf(job).
	stale := fence.Token{JobID: "job-1", Generation: 1}
	current := fence.Token{JobID: "job-1", Generation: 2}

	ok, err := f.HSet(ctx, "account:7", current, "balance", "120")
	fmt.Println("generation 2 wrote:", ok, err)
	ok, err = f.HSet(ctx, "account:7", stale, "balance", "100")
	fmt.Println("generation 1 wrote:", ok, err) // false: stop, the lease is gone
	fmt.Println("balance:", rdb.HGet(ctx, "account:7", "balance").Val())
	// Output:
	// generation 2 wrote: true <nil>
	// generation 1 wrote: false <nil>
	// balance: 120
}
