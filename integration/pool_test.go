package integration

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/internal/pooltest"
)

// TestPoolRealRedis runs the worker pool scenarios on a real server.
func TestPoolRealRedis(t *testing.T) {
	pooltest.Run(t, func(t testing.TB) redis.UniversalClient { return client(t) })
}
