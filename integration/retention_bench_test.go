package integration

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// BenchmarkRetentionKeepsPace runs b.N no-op jobs through a pool of 200
// handlers on a private redis-server, with the default retention (at most
// 10,000 done jobs) and with KeepForever, and samples the done index every
// 50 ms: done-max is the most it ever held (the bound, when trimming keeps
// up), MB-end Redis's used_memory at the end, slowest-ms the longest
// command Redis ran (its SLOWLOG: a trim of a grown batch included).
// Compare jobs/s of the two for what trimming costs.
//
//	go test ./integration/ -run '^$' -bench BenchmarkRetentionKeepsPace -benchtime 200000x -count 3
func BenchmarkRetentionKeepsPace(b *testing.B) {
	forever := broker.Retention{MaxDone: worker.KeepForever}
	for _, tc := range []struct {
		name string
		r    *broker.Retention
	}{{"Default", nil}, {"KeepForever", &forever}} {
		b.Run(tc.name, func(b *testing.B) {
			c := privateRedis(b)
			addr := c.Options().Addr
			pc := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 260})
			b.Cleanup(func() { _ = pc.Close() })
			const queue = "soak"
			ctx := context.Background()
			enq, err := broker.New(c, broker.Options{})
			if err != nil {
				b.Fatal(err)
			}
			for left := b.N; left > 0; left -= 1000 {
				jobs := make([]broker.Job, min(left, 1000))
				for i := range jobs {
					jobs[i] = broker.Job{Queue: queue, Kind: "noop"}
				}
				for _, e := range enq.Client().EnqueueMany(ctx, jobs) {
					if e.Err != nil {
						b.Fatal(e.Err)
					}
				}
			}
			pb, err := broker.New(pc, broker.Options{})
			if err != nil {
				b.Fatal(err)
			}
			var ran atomic.Int64
			all := make(chan struct{})
			h := handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
				if ran.Add(1) == int64(b.N) {
					close(all)
				}
				return nil
			})
			p, err := worker.New(pb, h, worker.Config{Queues: []worker.Queue{{Name: queue}}, Concurrency: 200,
				Retention: tc.r, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			var doneMax atomic.Int64
			sampled := make(chan struct{})
			stopSampling := make(chan struct{})
			go func() {
				defer close(sampled)
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stopSampling:
						return
					case <-tick.C:
					}
					if n, err := c.ZCard(ctx, "fenceq:{"+queue+"}:done").Result(); err == nil && n > doneMax.Load() {
						doneMax.Store(n)
					}
				}
			}()
			if err := c.ConfigSet(ctx, "slowlog-log-slower-than", "500").Err(); err != nil {
				b.Fatal(err)
			}
			c.SlowLogReset(ctx)
			b.ResetTimer()
			if err := p.Start(ctx); err != nil {
				b.Fatal(err)
			}
			<-all
			b.StopTimer()
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := p.Shutdown(sctx); err != nil {
				b.Fatal(err)
			}
			close(stopSampling)
			<-sampled
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			b.ReportMetric(float64(doneMax.Load()), "done-max")
			b.ReportMetric(redisUsedMemory(b, c)/1e6, "MB-end")
			slow, err := c.SlowLogGet(ctx, 128).Result()
			if err != nil {
				b.Fatal(err)
			}
			var slowest time.Duration
			for _, e := range slow {
				slowest = max(slowest, e.Duration)
			}
			b.ReportMetric(float64(slowest.Microseconds())/1000, "slowest-ms")
		})
	}
}

// redisUsedMemory is Redis's used_memory, in bytes.
func redisUsedMemory(b *testing.B, c *redis.Client) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal(fmt.Errorf("INFO memory has no used_memory"))
	return 0
}
