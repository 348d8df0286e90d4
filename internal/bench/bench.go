package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/internal/roundtrips"
	"github.com/fenceq/fenceq/worker"
)

// Result is what `workerd bench --json` prints. Field names are
// stable: scripts track them.
type Result struct {
	Jobs                int                `json:"jobs"`
	RedisCeilingPerS    float64            `json:"redis_ceiling_per_s"`
	EnqueueSinglePerS   float64            `json:"enqueue_single_per_s"`
	EnqueueBatchPerS    float64            `json:"enqueue_batch_per_s"`
	EnqueueSingleC50    float64            `json:"enqueue_single_c50_per_s"`
	EnqueueBatcherC50   float64            `json:"enqueue_batcher_c50_per_s"`
	BatcherC50MeanBatch float64            `json:"enqueue_batcher_c50_mean_batch"`
	ProcessPerS         float64            `json:"process_per_s"`
	CeilingFraction     float64            `json:"ceiling_fraction"`
	RoundTripsPerJob    float64            `json:"round_trips_per_job"`
	CommandsPerJob      float64            `json:"commands_per_job"`
	IdlePickupP50Ms     float64            `json:"idle_pickup_p50_ms"`
	IdlePickupP99Ms     float64            `json:"idle_pickup_p99_ms"`
	IdlePickupMaxMs     float64            `json:"idle_pickup_max_ms"`
	LoadedPickupP50Ms   float64            `json:"loaded_pickup_p50_ms"`
	LoadedPickupP99Ms   float64            `json:"loaded_pickup_p99_ms"`
	LoadedPickupMaxMs   float64            `json:"loaded_pickup_max_ms"`
	BytesPerPendingJob  float64            `json:"bytes_per_pending_job"`
	ProcessByConcurrent map[string]ProcRun `json:"process_by_concurrency"`
	ProcessByPayload    map[string]ProcRun `json:"process_by_payload"`
}

type ProcRun struct {
	PerS             float64 `json:"per_s"`
	RoundTripsPerJob float64 `json:"round_trips_per_job"`
	CommandsPerJob   float64 `json:"commands_per_job"`
}

// Run runs the soak, the groups' A/B, or else the measurements: a
// SoakResult, a GroupsResult or a Result.
func (bn *Bencher) Run(o Options) (any, error) {
	progress := func(what string) {
		if !o.JSON {
			fmt.Fprintf(bn.cfg.Stderr, "bench: %s...\n", what)
		}
	}
	switch {
	case o.Soak.Duration > 0:
		return bn.soakReporting(o.Soak, o.JSON)
	case o.Groups.Groups > 0:
		return bn.groupsAB(o.Jobs, o.Groups, progress)
	}
	return bn.measure(o.Jobs, progress)
}

// DeleteOnExit deletes bench's keys even when it was interrupted: under a
// context of its own, so that a Ctrl-C (whose context bench's is) does
// not stop the deleting. Its error says how to delete them by hand.
func (bn *Bencher) DeleteOnExit() error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(bn.ctx), time.Minute)
	defer cancel()
	if err := bn.deleteKeys(dctx); err != nil {
		return fmt.Errorf("delete bench's keys: %w; delete them with: redis-cli --scan --pattern '%s:*' | xargs redis-cli unlink", err, bn.cfg.Prefix)
	}
	return nil
}

// soakReporting runs the soak, writing each sample as it is taken: to
// standard output under a header, or with --json (whose standard output is
// the one JSON object) to standard error.
func (bn *Bencher) soakReporting(so SoakOptions, asJSON bool) (SoakResult, error) {
	w := bn.cfg.Stdout
	if asJSON {
		w = bn.cfg.Stderr
	}
	printSoakHeader(w)
	return bn.soak(so, func(s SoakSample) { printSoakSample(w, s) })
}

// measure runs every phase, deleting the phase's keys after each so that
// each starts on the same empty prefix.
func (bn *Bencher) measure(jobs int, progress func(string)) (Result, error) {
	r := Result{Jobs: jobs, ProcessByConcurrent: map[string]ProcRun{}, ProcessByPayload: map[string]ProcRun{}}
	var err error
	progress("Redis ceiling (EVALSHA of a trivial script, 50 clients)")
	if r.RedisCeilingPerS, err = bn.ceiling(50, 2*time.Second); err != nil {
		return r, err
	}
	progress("enqueue")
	if r.EnqueueSinglePerS, r.EnqueueBatchPerS, err = bn.enqueueRates(jobs); err != nil {
		return r, err
	}
	progress("memory per pending job")
	if r.BytesPerPendingJob, err = bn.memoryPerJob(10000); err != nil {
		return r, err
	}
	for _, c := range []int{1, 10, 50, 200} {
		progress(fmt.Sprintf("process, concurrency %d", c))
		n := jobs
		if c == 1 {
			n = max(n/4, 1)
		}
		run, err := bn.process(c, n, 0)
		if err != nil {
			return r, err
		}
		r.ProcessByConcurrent[strconv.Itoa(c)] = run
	}
	for _, size := range []int{64, 1024, 64 << 10} {
		progress(fmt.Sprintf("process, %d-byte payloads", size))
		n := jobs
		if size > 4096 {
			n = max(n/8, 1)
		}
		run, err := bn.process(50, n, size)
		if err != nil {
			return r, err
		}
		r.ProcessByPayload[strconv.Itoa(size)] = run
	}
	main := r.ProcessByConcurrent["50"]
	r.ProcessPerS, r.RoundTripsPerJob, r.CommandsPerJob = main.PerS, main.RoundTripsPerJob, main.CommandsPerJob
	r.CeilingFraction = r.ProcessPerS / r.RedisCeilingPerS
	progress("pickup latency, idle pool")
	idle, err := bn.pickup(false, 300)
	if err != nil {
		return r, err
	}
	r.IdlePickupP50Ms, r.IdlePickupP99Ms, r.IdlePickupMaxMs = idle[0], idle[1], idle[2]
	progress("pickup latency, pool under load")
	loaded, err := bn.pickup(true, 300)
	if err != nil {
		return r, err
	}
	r.LoadedPickupP50Ms, r.LoadedPickupP99Ms, r.LoadedPickupMaxMs = loaded[0], loaded[1], loaded[2]
	// Last, so that the figures measured before these existed run as they
	// always did.
	progress("enqueue, one at a time from 50 goroutines, plain and through a Batcher")
	if r.EnqueueSingleC50, _, err = bn.enqueueConcurrent(50, jobs, false); err != nil {
		return r, err
	}
	if r.EnqueueBatcherC50, r.BatcherC50MeanBatch, err = bn.enqueueConcurrent(50, jobs, true); err != nil {
		return r, err
	}
	return r, nil
}

// deleteKeys deletes every key under bench's prefix: SCAN with a MATCH on
// it, so nothing outside it is touched (the prefix is bench's own, and
// random hex has no glob characters).
func (bn *Bencher) deleteKeys(ctx context.Context) error {
	iter := bn.rdb.Scan(ctx, 0, bn.cfg.Prefix+":*", 1000).Iterator()
	batch := make([]string, 0, 1000)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := bn.rdb.Unlink(ctx, batch...).Err()
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}

// enqueueBatch is how many jobs one EnqueueMany of bench writes.
const enqueueBatch = 500

// Bencher runs the measurements or the soak on one Redis server, writing
// only keys under its Config's Prefix.
type Bencher struct {
	ctx context.Context
	rdb redis.UniversalClient
	cfg Config
	seq int
}

// Config is what a Bencher measures and where it writes.
type Config struct {
	Redis   redis.UniversalClient                                    // the server measured
	Dial    func(ctx context.Context) (redis.UniversalClient, error) // a new client to the same server (a *redis.Client)
	Prefix  string                                                   // bench's own keys; deleted by DeleteOnExit
	Tracing trace.TracerProvider                                     // nil: no tracing
	Stdout  io.Writer                                                // the soak's samples
	Stderr  io.Writer                                                // progress, and the soak's samples with JSON
}

// Options are what one run measures.
type Options struct {
	Jobs int         // jobs per throughput measurement
	JSON bool        // the result is printed as JSON: no progress lines, the soak's samples to Stderr
	Soak SoakOptions // a soak instead of the measurements when Soak.Duration > 0
	// The groups' A/B instead of the measurements when Groups.Groups > 0.
	Groups GroupsOptions
}

// New is a Bencher for cfg.
func New(ctx context.Context, cfg Config) *Bencher {
	return &Bencher{ctx: ctx, rdb: cfg.Redis, cfg: cfg}
}

// client is a fresh counted client and broker under a fresh queue.
func (bn *Bencher) client(poolSize int) (*redis.Client, *broker.Broker, *roundtrips.Counter, string, error) {
	rdb, err := bn.cfg.Dial(bn.ctx)
	if err != nil {
		return nil, nil, nil, "", err
	}
	opt := rdb.(*redis.Client).Options()
	rdb.Close()
	opt.PoolSize = poolSize
	c := redis.NewClient(opt)
	cnt := &roundtrips.Counter{}
	c.AddHook(cnt)
	opts := broker.Options{Prefix: bn.cfg.Prefix}
	if bn.cfg.Tracing != nil {
		opts.TracerProvider = bn.cfg.Tracing
	}
	b, err := broker.New(c, opts)
	bn.seq++
	return c, b, cnt, fmt.Sprintf("bench-%d", bn.seq), err
}

func (bn *Bencher) ceiling(conc int, d time.Duration) (float64, error) {
	s := redis.NewScript("return 1")
	if err := s.Load(bn.ctx, bn.rdb).Err(); err != nil {
		return 0, err
	}
	c, _, _, _, err := bn.client(conc + 2)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var ops atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && bn.ctx.Err() == nil {
				if s.EvalSha(bn.ctx, c, nil).Err() == nil {
					ops.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(ops.Load()) / d.Seconds(), nil
}

func (bn *Bencher) enqueueRates(n int) (single, batch float64, err error) {
	c, b, _, q, err := bn.client(4)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	payload := []byte(`{"n":1}`)
	start := time.Now()
	for range n / 4 {
		if _, err := b.Client().Enqueue(bn.ctx, broker.Job{Queue: q, Kind: "noop", Payload: payload}); err != nil {
			return 0, 0, err
		}
	}
	single = float64(n/4) / time.Since(start).Seconds()
	start = time.Now()
	if err := enqueueN(bn.ctx, b, q+"b", n, payload); err != nil {
		return 0, 0, err
	}
	batch = float64(n) / time.Since(start).Seconds()
	return single, batch, bn.deleteKeys(bn.ctx)
}

// enqueueConcurrent measures n jobs enqueued one at a time by conc
// goroutines, each waiting for its answer before its next job: with
// Client.Enqueue, or through a Batcher (then also the mean jobs per round
// trip).
func (bn *Bencher) enqueueConcurrent(conc, n int, batcher bool) (perS, meanBatch float64, err error) {
	c, b, _, q, err := bn.client(conc + 10)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	enqueue := b.Client().Enqueue
	var bt *broker.Batcher
	if batcher {
		if bt, err = broker.NewBatcher(b.Client(), broker.BatcherOptions{}); err != nil {
			return 0, 0, err
		}
		defer bt.Close() // on the way out of an error; Close is idempotent
		enqueue = bt.Enqueue
	}
	payload := []byte(`{"n":1}`)
	var next atomic.Int64
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if _, err := enqueue(bn.ctx, broker.Job{Queue: q, Kind: "noop", Payload: payload}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	if bt != nil {
		_ = bt.Close()
		if st := bt.Stats(); st.Batches > 0 {
			meanBatch = float64(st.Jobs) / float64(st.Batches)
		}
	}
	return float64(n) / took.Seconds(), meanBatch, bn.deleteKeys(bn.ctx)
}

func enqueueN(ctx context.Context, b *broker.Broker, q string, n int, payload []byte) error {
	return enqueueGroups(ctx, b, q, n, payload, 0)
}

// enqueueGroups enqueues n jobs in batches: job i in group "g<i mod
// groups>", or in none when groups is 0.
func enqueueGroups(ctx context.Context, b *broker.Broker, q string, n int, payload []byte, groups int) error {
	batch := make([]broker.Job, 0, enqueueBatch)
	for i := 0; i < n; i++ {
		j := broker.Job{Queue: q, Kind: "noop", Payload: payload}
		if groups > 0 {
			j.Group = "g" + strconv.Itoa(i%groups)
		}
		batch = append(batch, j)
		if len(batch) == enqueueBatch || i == n-1 {
			for _, r := range b.Client().EnqueueMany(ctx, batch) {
				if r.Err != nil {
					return r.Err
				}
			}
			batch = batch[:0]
		}
	}
	return nil
}

func (bn *Bencher) memoryPerJob(n int) (float64, error) {
	used := func(b *broker.Broker) (int64, error) {
		ms, err := b.Inspector().ServerMemory(bn.ctx) // one server: bench runs on a single node
		if err != nil {
			return 0, err
		}
		return ms[0].Used, nil
	}
	c, b, _, q, err := bn.client(4)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	// The first enqueues create the queue's fixed keys and the connection
	// that pipelines use (a batch of one goes without a pipeline, and a
	// connection costs Redis some 20 KB of buffers); measure after them.
	if err := enqueueN(bn.ctx, b, q, 2, make([]byte, 64)); err != nil {
		return 0, err
	}
	before, err := used(b)
	if err != nil {
		return 0, err
	}
	if err := enqueueN(bn.ctx, b, q, n, []byte(strings.Repeat("x", 64))); err != nil {
		return 0, err
	}
	after, err := used(b)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), bn.deleteKeys(bn.ctx)
}

// process measures a pool of the given concurrency draining n no-op jobs,
// counting every round trip of the enqueue (batched) and of the pool.
func (bn *Bencher) process(conc, n, size int) (ProcRun, error) {
	return bn.processGroups(conc, n, size, 0, nil)
}

// processGroups is process with the jobs spread over groups groups (none
// when 0; no group limits), calling enqueued (when not nil) once the
// jobs are enqueued, before the pool starts.
func (bn *Bencher) processGroups(conc, n, size, groups int, enqueued func() error) (ProcRun, error) {
	c, b, cnt, q, err := bn.client(conc + 10)
	if err != nil {
		return ProcRun{}, err
	}
	defer c.Close()
	var done atomic.Int64
	all := make(chan struct{})
	p, err := worker.New(b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		if done.Add(1) == int64(n) {
			close(all)
		}
		return nil
	}), worker.Config{Queues: []worker.Queue{{Name: q}}, Concurrency: conc, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return ProcRun{}, err
	}
	payload := []byte(`{}`)
	if size > 0 {
		payload = []byte(`"` + strings.Repeat("x", size-2) + `"`)
	}
	if err := enqueueGroups(bn.ctx, b, q, n, payload, groups); err != nil {
		return ProcRun{}, err
	}
	if enqueued != nil {
		if err := enqueued(); err != nil {
			return ProcRun{}, err
		}
	}
	if err := p.Start(bn.ctx); err != nil {
		return ProcRun{}, err
	}
	// Stopped before any return, so that no pool writes keys after bench
	// deleted them.
	shutdown := shutdownOnce(bn.ctx, p)
	defer shutdown()
	base := cnt.Trips.Load() - int64((n+enqueueBatch-1)/enqueueBatch) // keep the enqueue pipelines, drop startup checks
	baseCmds := cnt.Commands.Load() - int64(n)
	start := time.Now()
	select {
	case <-all:
	case <-bn.ctx.Done():
		return ProcRun{}, bn.ctx.Err()
	}
	for p.Stats().Succeeded < int64(n) && bn.ctx.Err() == nil {
		time.Sleep(100 * time.Microsecond)
	}
	took := time.Since(start)
	trips, cmds := cnt.Trips.Load()-base, cnt.Commands.Load()-baseCmds
	if err := shutdown(); err != nil {
		return ProcRun{}, err
	}
	return ProcRun{PerS: float64(n) / took.Seconds(), RoundTripsPerJob: float64(trips) / float64(n),
		CommandsPerJob: float64(cmds) / float64(n)}, bn.deleteKeys(bn.ctx)
}

// pickup measures enqueue → handler start, on an idle pool of one slot, or
// on a pool of 50 slots kept busy by a producer of no-op jobs.
func (bn *Bencher) pickup(loaded bool, samples int) ([3]float64, error) {
	c, b, _, q, err := bn.client(70)
	if err != nil {
		return [3]float64{}, err
	}
	defer c.Close()
	started := make(chan time.Time, 1)
	conc := 1
	if loaded {
		conc = 50
	}
	p, err := worker.New(b, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		if j.Kind == "probe" {
			started <- time.Now()
		}
		return nil
	}), worker.Config{Queues: []worker.Queue{{Name: q}}, Concurrency: conc, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return [3]float64{}, err
	}
	if err := p.Start(bn.ctx); err != nil {
		return [3]float64{}, err
	}
	shutdown := shutdownOnce(bn.ctx, p)
	defer shutdown()
	stop := sync.OnceFunc(func() {}) // stops the producer, and waits for it
	if loaded {
		var producing sync.WaitGroup
		quit := make(chan struct{})
		stop = sync.OnceFunc(func() { close(quit); producing.Wait() })
		producing.Add(1)
		go func() { // about half the pool's capacity, in small batches
			defer producing.Done()
			for {
				select {
				case <-quit:
					return
				case <-time.After(2 * time.Millisecond):
				}
				_ = enqueueN(bn.ctx, b, q, 10, []byte(`{}`))
			}
		}()
		time.Sleep(200 * time.Millisecond)
	}
	defer stop() // before the pool's shutdown: deferred calls run last first
	lat := make([]time.Duration, 0, samples)
	for range samples {
		time.Sleep(3 * time.Millisecond)
		t0 := time.Now()
		if _, err := b.Client().Enqueue(bn.ctx, broker.Job{Queue: q, Kind: "probe", Payload: []byte(`{}`), Priority: 0}); err != nil {
			return [3]float64{}, err
		}
		select {
		case t := <-started:
			lat = append(lat, t.Sub(t0))
		case <-bn.ctx.Done():
			return [3]float64{}, bn.ctx.Err()
		case <-time.After(10 * time.Second):
			return [3]float64{}, fmt.Errorf("a probe job was not picked up in 10s")
		}
	}
	stop()
	if err := shutdown(); err != nil {
		return [3]float64{}, err
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return [3]float64{ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1])}, bn.deleteKeys(bn.ctx)
}

// shutdownOnce answers a function that shuts p down the first time it is
// called (later calls answer the same error). It does so even when ctx was
// cancelled (Ctrl-C), so that bench deletes its keys only once no pool
// writes them.
func shutdownOnce(ctx context.Context, p *worker.Pool) func() error {
	return sync.OnceValue(func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return p.Shutdown(sctx)
	})
}

// PrintTable writes r, a SoakResult, a GroupsResult or a Result, as a
// table.
func PrintTable(w io.Writer, r any) {
	switch r := r.(type) {
	case SoakResult:
		printSoak(w, r)
	case GroupsResult:
		printGroups(w, r)
	case Result:
		printTable(w, r)
	}
}

func printTable(w io.Writer, r Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Redis ceiling (trivial EVALSHA, 50 clients)", fmt.Sprintf("%.0f/s", r.RedisCeilingPerS))
	row("enqueue, one at a time", fmt.Sprintf("%.0f/s", r.EnqueueSinglePerS))
	row("enqueue, batched (EnqueueMany, 500)", fmt.Sprintf("%.0f/s", r.EnqueueBatchPerS))
	row("enqueue, one at a time from 50 goroutines", fmt.Sprintf("%.0f/s", r.EnqueueSingleC50))
	row("enqueue, one at a time from 50 goroutines, Batcher", fmt.Sprintf("%.0f/s  %.1f jobs/round trip", r.EnqueueBatcherC50, r.BatcherC50MeanBatch))
	for _, c := range []string{"1", "10", "50", "200"} {
		p := r.ProcessByConcurrent[c]
		row("process no-op, concurrency "+c, fmt.Sprintf("%.0f/s  %.2f round trips/job  %.2f commands/job", p.PerS, p.RoundTripsPerJob, p.CommandsPerJob))
	}
	for _, s := range []string{"64", "1024", "65536"} {
		p := r.ProcessByPayload[s]
		row("process, "+s+"-byte payload, concurrency 50", fmt.Sprintf("%.0f/s", p.PerS))
	}
	row("process/s as a fraction of the ceiling", fmt.Sprintf("%.1f%%", 100*r.CeilingFraction))
	row("pickup latency, idle (p50 / p99 / max)", fmt.Sprintf("%.2f / %.2f / %.2f ms", r.IdlePickupP50Ms, r.IdlePickupP99Ms, r.IdlePickupMaxMs))
	row("pickup latency, under load (p50 / p99 / max)", fmt.Sprintf("%.2f / %.2f / %.2f ms", r.LoadedPickupP50Ms, r.LoadedPickupP99Ms, r.LoadedPickupMaxMs))
	row("Redis memory per pending job (64-byte payload)", fmt.Sprintf("%.0f bytes", r.BytesPerPendingJob))
	_ = tw.Flush()
}
