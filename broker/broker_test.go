package broker_test

import (
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/internal/brokertest"
)

// TestMiniredis runs the conformance suite on miniredis, with a clock the
// tests move by hand.
func TestMiniredis(t *testing.T) {
	brokertest.Run(t, func(t testing.TB) brokertest.Backend {
		mr := miniredis.RunT(t)
		var mu sync.Mutex
		now := time.Now()
		mr.SetTime(now)
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		return brokertest.Backend{
			Client: c,
			Advance: func(d time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				now = now.Add(d)
				mr.SetTime(now)
				mr.FastForward(d) // and expire keys with a TTL, as real time would
			},
			Frozen: true,
		}
	})
}
