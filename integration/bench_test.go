package integration

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/internal/roundtrips"
	"github.com/fenceq/fenceq/worker"
)

// benchRig is a broker for enqueueing (on rdb) and a pool on its own
// counted client.
type benchRig struct {
	rdb   redis.UniversalClient
	enq   *broker.Broker
	pool  *worker.Pool
	count *roundtrips.Counter
}

func newBenchRig(b *testing.B, concurrency int, h handlers.HandlerFunc) *benchRig {
	b.Helper()
	prefix := fmt.Sprintf("fqbench-%d", time.Now().UnixNano())
	rdb := client(b)
	enq, err := broker.New(rdb, broker.Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	pc := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: concurrency + 10})
	b.Cleanup(func() { _ = pc.Close() })
	cnt := &roundtrips.Counter{}
	pc.AddHook(cnt)
	pb, err := broker.New(pc, broker.Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	p, err := worker.New(pb, h, worker.Config{Concurrency: concurrency, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, prefix+":*").Result()
		for i := 0; i < len(keys); i += 1000 {
			rdb.Del(ctx, keys[i:min(i+1000, len(keys))]...)
		}
	})
	return &benchRig{rdb: rdb, enq: enq, pool: p, count: cnt}
}

// fill enqueues n no-op jobs in batches.
func (r *benchRig) fill(b *testing.B, n int) {
	jobs := make([]broker.Job, 0, 500)
	for i := range n {
		jobs = append(jobs, broker.Job{Queue: worker.QueueDefault, Kind: "noop"})
		if len(jobs) == cap(jobs) || i == n-1 {
			for _, e := range r.enq.Client().EnqueueMany(context.Background(), jobs) {
				if e.Err != nil {
					b.Fatal(e.Err)
				}
			}
			jobs = jobs[:0]
		}
	}
}

// redisBusy resets the server's command statistics and returns a function
// that answers the microseconds Redis has spent running scripts since: the
// server-side cost of the pool's work (the commands a script calls are in
// its time; anything else on the same server counts too, so give the
// benchmark a Redis of its own with FENCEQ_REDIS_ADDR).
func redisBusy(b *testing.B, c redis.UniversalClient) func(context.Context) float64 {
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context) float64 {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		total := 0.0
		for _, line := range strings.Split(info, "\n") {
			if !strings.HasPrefix(line, "cmdstat_eval") && !strings.HasPrefix(line, "cmdstat_fcall") {
				continue
			}
			for _, f := range strings.Split(line, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					us, _ := strconv.ParseFloat(v, 64)
					total += us
				}
			}
		}
		return total
	}
}

func (r *benchRig) start(b *testing.B) {
	if err := r.pool.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.pool.Shutdown(context.Background()) })
	r.count.Reset() // startup checks are not per-job work
}

// BenchmarkPoolNoop measures how fast one pool drains a backlog of no-op
// jobs, and how many Redis round trips (and commands) the pool spends per
// job: claim and settlement, heartbeats and wake-ups included, the enqueue
// not (it runs before the timer, on another client). Its allocs/op and
// B/op are the whole process's allocations per job (the pool, the broker,
// go-redis), and go-cpu-µs/job the process's user and system CPU time per
// job: the Go side of a job, beside redis-µs/job, the server's.
func BenchmarkPoolNoop(b *testing.B) {
	for _, conc := range []int{1, 10, 50, 200} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			b.ReportAllocs()
			var done atomic.Int64
			all := make(chan struct{})
			n := int64(b.N)
			r := newBenchRig(b, conc, func(context.Context, *handlers.Job) error {
				if done.Add(1) == n {
					close(all)
				}
				return nil
			})
			ctx := context.Background()
			r.fill(b, b.N)
			b.ResetTimer()
			r.start(b)
			busy := redisBusy(b, r.rdb)
			cpu0 := processCPU()
			<-all
			cpu := processCPU() - cpu0
			b.StopTimer()
			// The last settlements may still be in flight: wait for them.
			for r.pool.Stats().Succeeded < n {
				time.Sleep(time.Millisecond)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			b.ReportMetric(float64(r.count.Trips.Load())/float64(b.N), "roundtrips/job")
			b.ReportMetric(float64(r.count.Commands.Load())/float64(b.N), "cmds/job")
			b.ReportMetric(busy(ctx)/float64(b.N), "redis-µs/job")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "go-cpu-µs/job")
			b.ReportMetric(0, "ns/op") // jobs/s says it better
		})
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIdlePickup measures the time from just before Enqueue to the
// handler's start, on a pool that is idle (blocked in BLPOP on its wake-up
// key) each time.
func BenchmarkIdlePickup(b *testing.B) {
	started := make(chan time.Time, 1)
	r := newBenchRig(b, 1, func(context.Context, *handlers.Job) error {
		started <- time.Now()
		return nil
	})
	r.start(b)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		time.Sleep(3 * time.Millisecond) // settle and go back to blocking
		b.StartTimer()
		t0 := time.Now()
		if _, err := r.enq.Client().Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "noop"}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-started).Sub(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkBrokerScripts times each hot script on the real Redis: one
// enqueue, a claim of 50 with their batched ack, an ack or a failure that
// claims the next job (the fused path of a pool of one slot), and a renew
// of 50 leases.
func BenchmarkBrokerScripts(b *testing.B) {
	r := newBenchRig(b, 1, func(context.Context, *handlers.Job) error { return nil })
	ctx := context.Background()
	q := "scripts"
	b.Run("Enqueue", func(b *testing.B) {
		for b.Loop() {
			if _, err := r.enq.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "k"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	fill := func(n int) {
		jobs := make([]broker.Job, n)
		for i := range jobs {
			jobs[i] = broker.Job{Queue: q, Kind: "k"}
		}
		for _, e := range r.enq.Client().EnqueueMany(ctx, jobs) {
			if e.Err != nil {
				b.Fatal(e.Err)
			}
		}
	}
	b.Run("Claim50AckMany", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			fill(50)
			b.StartTimer()
			res, err := r.enq.Leases().Claim(ctx, q, 50, time.Minute)
			if err != nil || len(res.Leases) != 50 {
				b.Fatalf("claim: %v (%d)", err, len(res.Leases))
			}
			acks := make([]broker.Ack, len(res.Leases))
			for i, l := range res.Leases {
				acks[i] = broker.Ack{Lease: l}
			}
			if _, err := r.enq.Leases().AckMany(ctx, acks); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*50), "ns/job")
	})
	// A pool of one slot working through a backlog: each call acks the job
	// it holds and claims the next (the fused path, one round trip a job).
	b.Run("FusedAck1", func(b *testing.B) {
		fill(b.N + 1)
		res, err := r.enq.Leases().Claim(ctx, q, 1, time.Minute)
		if err != nil || len(res.Leases) != 1 {
			b.Fatalf("claim: %v (%d)", err, len(res.Leases))
		}
		l := res.Leases[0]
		b.ResetTimer()
		for range b.N {
			spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: q, N: 1, Lease: time.Minute}
			fa, err := r.enq.Leases().FusedAck(ctx, []broker.Ack{{Lease: l}}, spec)
			os, res := fa.Outcomes, fa.Claim
			if err != nil || os[0] != broker.OK || len(res.Leases) != 1 {
				b.Fatalf("FusedAck: %v %v (%d)", err, os, len(res.Leases))
			}
			l = res.Leases[0]
		}
	})
	// A pool of one slot whose handlers fail: each call fails the job it
	// holds (retried in an hour) and claims the next (FusedFail1), or
	// finds the queue empty (FusedFail1Empty: the claim takes nothing).
	fusedFail := func(b *testing.B, empty bool) {
		fill(b.N + 1)
		n := 1
		if empty {
			n = b.N + 1
		}
		var leases []broker.Lease
		for len(leases) < n {
			res, err := r.enq.Leases().Claim(ctx, q, min(50, n-len(leases)), time.Minute)
			if err != nil || len(res.Leases) == 0 {
				b.Fatalf("claim: %v (%d)", err, len(res.Leases))
			}
			leases = append(leases, res.Leases...)
		}
		l := leases[0]
		busy := redisBusy(b, r.rdb)
		b.ResetTimer()
		for i := range b.N {
			if empty {
				l = leases[i]
			}
			spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: q, N: 1, Lease: time.Minute}
			fused, err := r.enq.Leases().FusedFail(ctx, l, broker.Failure{Error: "e", Backoff: time.Hour}, spec)
			o, res := fused.Outcome, fused.Claim
			if err != nil || o != broker.OK || len(res.Leases) != map[bool]int{true: 0, false: 1}[empty] {
				b.Fatalf("FusedFail: %v %v (%d)", err, o, len(res.Leases))
			}
			if !empty {
				l = res.Leases[0]
			}
		}
		b.ReportMetric(busy(ctx)/float64(b.N), "redis-µs/op") // the failure's script alone: setup ran before the reset
	}
	// A job given back and claimed again, over and over: each claim moves
	// the last settlement's record aside for its re-send (lib.lua's
	// set_aside), which a first claim does not.
	b.Run("ReleaseClaim1", func(b *testing.B) {
		q := fmt.Sprintf("reclaim-%d", b.N) // its one job, alone in its queue
		if _, err := r.enq.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "k", MaxAttempts: 1}); err != nil {
			b.Fatal(err)
		}
		res, err := r.enq.Leases().Claim(ctx, q, 1, time.Minute)
		if err != nil || len(res.Leases) != 1 {
			b.Fatalf("claim: %v (%d)", err, len(res.Leases))
		}
		l := res.Leases[0]
		busy := redisBusy(b, r.rdb)
		b.ResetTimer()
		for range b.N {
			if got, err := r.enq.Leases().Release(ctx, l); err != nil || got.Outcome != broker.OK {
				b.Fatalf("Release: %v %v", err, got.Outcome)
			}
			res, err := r.enq.Leases().Claim(ctx, q, 1, time.Minute)
			if err != nil || len(res.Leases) != 1 {
				b.Fatalf("claim: %v (%d)", err, len(res.Leases))
			}
			l = res.Leases[0]
		}
		b.ReportMetric(busy(ctx)/float64(b.N), "redis-µs/op") // a release and a claim
	})
	b.Run("FusedFail1", func(b *testing.B) { fusedFail(b, false) })
	b.Run("FusedFail1Empty", func(b *testing.B) { fusedFail(b, true) })
	b.Run("Renew50", func(b *testing.B) {
		fill(50)
		res, err := r.enq.Leases().Claim(ctx, q, 50, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := r.enq.Leases().Renew(ctx, res.Leases, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEnqueue measures enqueueing one job at a time, each caller
// waiting for its answer: the round-trip floor (PING), Client.Enqueue from
// one goroutine, and from 50 goroutines plainly and through a Batcher.
// jobs/s is the figure; roundtrips/job counts the enqueues' client only.
func BenchmarkEnqueue(b *testing.B) {
	ctx := context.Background()
	setup := func(b *testing.B, pool int) (*broker.Broker, *redis.Client, *roundtrips.Counter) {
		client(b) // skips without a Redis
		prefix := fmt.Sprintf("fqbench-%d", time.Now().UnixNano())
		c := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: pool})
		b.Cleanup(func() {
			keys, _ := c.Keys(ctx, prefix+":*").Result()
			for i := 0; i < len(keys); i += 1000 {
				c.Del(ctx, keys[i:min(i+1000, len(keys))]...)
			}
			_ = c.Close()
		})
		cnt := &roundtrips.Counter{}
		c.AddHook(cnt)
		br, err := broker.New(c, broker.Options{Prefix: prefix})
		if err != nil {
			b.Fatal(err)
		}
		// The queue's registration is not per-job work.
		if _, err := br.Client().Enqueue(ctx, broker.Job{Queue: "enq", Kind: "k"}); err != nil {
			b.Fatal(err)
		}
		cnt.Reset()
		return br, c, cnt
	}
	report := func(b *testing.B, cnt *roundtrips.Counter) {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		b.ReportMetric(float64(cnt.Trips.Load())/float64(b.N), "roundtrips/job")
	}
	job := broker.Job{Queue: "enq", Kind: "k", Payload: []byte(`{"n":1}`)}
	b.Run("RoundTripFloor", func(b *testing.B) {
		_, c, cnt := setup(b, 4)
		for b.Loop() {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
		report(b, cnt)
	})
	b.Run("Single", func(b *testing.B) {
		br, _, cnt := setup(b, 4)
		for b.Loop() {
			if _, err := br.Client().Enqueue(ctx, job); err != nil {
				b.Fatal(err)
			}
		}
		report(b, cnt)
	})
	concurrent := func(b *testing.B, enqueue func(context.Context, broker.Job) (string, error), cnt *roundtrips.Counter) {
		b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := enqueue(ctx, job); err != nil {
					b.Error(err)
					return
				}
			}
		})
		report(b, cnt)
	}
	b.Run("Concurrent50", func(b *testing.B) {
		br, _, cnt := setup(b, 60)
		concurrent(b, br.Client().Enqueue, cnt)
	})
	b.Run("Concurrent50Batcher", func(b *testing.B) {
		br, _, cnt := setup(b, 60)
		bt, err := broker.NewBatcher(br.Client(), broker.BatcherOptions{})
		if err != nil {
			b.Fatal(err)
		}
		concurrent(b, bt.Enqueue, cnt)
		_ = bt.Close()
		st := bt.Stats()
		b.ReportMetric(float64(st.Jobs)/float64(max(st.Batches, 1)), "jobs/batch")
	})
}
