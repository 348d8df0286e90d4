// Package roundtrips counts a go-redis client's round trips and commands,
// for benchmarks: `workerd bench` and the Go benchmarks report both per job.
package roundtrips

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter is a go-redis hook (client.AddHook). A single command is one
// round trip; a whole pipeline is one round trip of len(cmds) commands.
type Counter struct {
	Trips, Commands atomic.Int64 // round trips, and the commands they carried
}

func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.Trips.Add(1)
		c.Commands.Add(1)
		return next(ctx, cmd)
	}
}

func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.Trips.Add(1)
		c.Commands.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Reset sets both counts back to zero.
func (c *Counter) Reset() {
	c.Trips.Store(0)
	c.Commands.Store(0)
}
