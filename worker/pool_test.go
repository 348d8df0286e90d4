package worker_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/internal/pooltest"
)

// TestMiniredis runs the pool scenarios on miniredis, on real time.
func TestMiniredis(t *testing.T) {
	pooltest.Run(t, func(t testing.TB) redis.UniversalClient {
		mr := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		return c
	})
}
