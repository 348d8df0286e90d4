package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// SoakResult is what `workerd bench --soak D --json` prints. Field names
// are stable: scripts track them.
type SoakResult struct {
	DurationS      float64 `json:"soak_duration_s"`
	Concurrency    int     `json:"soak_concurrency"`
	Retention      string  `json:"soak_retention"`
	BacklogTarget  int     `json:"soak_backlog_target"`
	Done           int64   `json:"soak_done"`
	JobsPerS       float64 `json:"soak_jobs_per_s"`
	SlopeBytesPerS float64 `json:"soak_memory_slope_bytes_per_s"`
	// The slope over the second half's jobs/s: what each job done leaves
	// behind, beside the size of a kept job (about 500 bytes).
	SlopeBytesPerJob float64      `json:"soak_memory_slope_bytes_per_job"`
	SecondHalfPerS   float64      `json:"soak_second_half_jobs_per_s"`
	PeakBytes        int64        `json:"soak_memory_peak_bytes"`
	StartBytes       int64        `json:"soak_memory_start_bytes"`
	Samples          []SoakSample `json:"soak_samples"`
	// Redis's CPU (used_cpu_user + used_cpu_sys of INFO cpu) from the
	// first sample to the last, and over the jobs done meanwhile: what
	// Redis spent per job, enqueue, claim and settle included. It counts
	// whatever else that Redis did too, so it means something only on a
	// Redis nothing else uses.
	RedisCPUS        float64 `json:"soak_redis_cpu_s"`
	RedisCPUUsPerJob float64 `json:"soak_redis_cpu_us_per_job"`
}

// SoakSample is one reading, taken every --soak-every.
type SoakSample struct {
	ElapsedS   float64 `json:"elapsed_s"`
	UsedMemory int64   `json:"used_memory"`
	Done       int64   `json:"done"`
	JobsPerS   float64 `json:"jobs_per_s"` // since the sample before
	Backlog    int64   `json:"backlog"`    // enqueued and not yet handled
	Kept       int64   `json:"kept"`       // finished jobs still in Redis
	redisCPU   float64 // Redis's used_cpu_user + used_cpu_sys, seconds (not in the JSON)
}

// soakProducers is how many goroutines enqueue during a soak.
const soakProducers = 4

type SoakOptions struct {
	Duration, Every time.Duration // how long; how often used_memory is read
	Concurrency     int
	Backlog         int
	RetentionName   string            // how Retention was given, reported in SoakResult
	Retention       *broker.Retention // the soak pool's; nil: the pool's defaults
}

// soak runs producers and a pool of no-op handlers at full speed for
// o.Duration (rounded up to a whole o.Every), the producers keeping about
// o.Backlog jobs pending (a backlog that grew without bound would be what
// the memory measured), and reads Redis's used_memory every o.Every. Each
// sample goes to report as it is taken.
func (bn *Bencher) soak(o SoakOptions, report func(SoakSample)) (SoakResult, error) {
	r := SoakResult{DurationS: o.Duration.Seconds(), Concurrency: o.Concurrency, Retention: o.RetentionName, BacklogTarget: o.Backlog}
	c, b, _, q, err := bn.client(o.Concurrency + 10)
	if err != nil {
		return r, err
	}
	defer c.Close()
	sr := &soakRun{bn: bn, b: b, q: q, handled: make(chan struct{}, 1)}
	p, err := worker.New(b, handlers.HandlerFunc(sr.handle), worker.Config{Queues: []worker.Queue{{Name: q}},
		Concurrency: o.Concurrency, Retention: o.Retention, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return r, err
	}
	sr.start = time.Now()
	s, err := sr.sample(SoakSample{})
	if err != nil {
		return r, err
	}
	r.Samples, r.StartBytes = append(r.Samples, s), s.UsedMemory
	report(s)
	if err := p.Start(bn.ctx); err != nil {
		return r, err
	}
	shutdown := shutdownOnce(bn.ctx, p)
	defer shutdown()
	pctx, stopProducers := sr.startProducers(o.Backlog)
	// Run before the pool's shutdown (deferred calls run last first), so
	// that nothing enqueues after bench deleted its keys.
	defer stopProducers()
	if err := sr.follow(pctx, &r, o, report, stopProducers); err != nil {
		return r, err
	}
	if err := stopProducers(); err != nil {
		return r, err
	}
	if err := shutdown(); err != nil {
		return r, err
	}
	err = r.summarize(o.Duration)
	return r, err
}

// soakRun is what a soak's handler, producers and samples share.
type soakRun struct {
	bn             *Bencher
	b              *broker.Broker
	q              string
	start          time.Time
	done, enqueued atomic.Int64
	handled        chan struct{} // wakes a producer waiting for room
}

// handle is the soak's no-op handler: it counts the job done.
func (sr *soakRun) handle(context.Context, *handlers.Job) error {
	sr.done.Add(1)
	select {
	case sr.handled <- struct{}{}:
	default:
	}
	return nil
}

// startProducers starts soakProducers producers keeping about backlog
// jobs enqueued. The first to fail stops the others and ends pctx; stop
// stops them too, waits for them, and answers that first failure.
func (sr *soakRun) startProducers(backlog int) (pctx context.Context, stop func() error) {
	pctx, stopProducing := context.WithCancel(sr.bn.ctx)
	var producing sync.WaitGroup
	var failed error
	var failOnce sync.Once
	for range soakProducers {
		producing.Go(func() {
			if err := produce(pctx, sr.b, sr.q, backlog, &sr.enqueued, &sr.done, sr.handled); err != nil {
				failOnce.Do(func() { failed = fmt.Errorf("producer: %w", err) })
				stopProducing()
			}
		})
	}
	return pctx, sync.OnceValue(func() error {
		stopProducing()
		producing.Wait()
		return failed
	})
}

// follow takes a sample every o.Every into r.Samples until the first at
// or past o.Duration. It stops early when pctx ends: a producer failed
// (answered by stopProducers), or bench was interrupted.
func (sr *soakRun) follow(pctx context.Context, r *SoakResult, o SoakOptions, report func(SoakSample), stopProducers func() error) error {
	// The samples fall on a schedule from the first one (start + k·every),
	// not from when the pool had started: a slow start makes the next
	// sample come sooner, never drops one.
	for k := 1; r.Samples[len(r.Samples)-1].ElapsedS < o.Duration.Seconds(); k++ {
		wait := time.NewTimer(time.Until(sr.start.Add(time.Duration(k) * o.Every)))
		select {
		case <-wait.C:
		case <-pctx.Done():
			wait.Stop()
			return cmp.Or(stopProducers(), sr.bn.ctx.Err())
		}
		s, err := sr.sample(r.Samples[len(r.Samples)-1])
		if err != nil {
			return err
		}
		r.Samples = append(r.Samples, s)
		report(s)
	}
	return nil
}

// sample reads used_memory, Redis's CPU and the queue's counts; its rate
// is since prev.
func (sr *soakRun) sample(prev SoakSample) (SoakSample, error) {
	ms, err := sr.b.Inspector().ServerMemory(sr.bn.ctx) // one server: bench runs on a single node
	if err != nil {
		return SoakSample{}, fmt.Errorf("read used_memory: %w", err)
	}
	used := ms[0].Used
	info, err := sr.bn.rdb.Info(sr.bn.ctx, "cpu").Result()
	if err != nil {
		return SoakSample{}, fmt.Errorf("read INFO cpu: %w", err)
	}
	cpu, err := redisCPU(info)
	if err != nil {
		return SoakSample{}, err
	}
	n, err := sr.b.Inspector().Counts(sr.bn.ctx, sr.q)
	if err != nil {
		return SoakSample{}, err
	}
	// Done is read after the counts, so that it is never below the
	// finished jobs they hold.
	s := SoakSample{ElapsedS: time.Since(sr.start).Seconds(), UsedMemory: used, Done: sr.done.Load(),
		Kept: n.Done + n.Cancelled + n.Dead, redisCPU: cpu}
	s.Backlog = sr.enqueued.Load() - s.Done
	if dt := s.ElapsedS - prev.ElapsedS; dt > 0 {
		s.JobsPerS = float64(s.Done-prev.Done) / dt
	}
	return s, nil
}

// summarize fills in the totals, Redis's CPU per job, the peak, and the
// memory slope fitted over the samples of the second half of a soak of
// duration d.
func (r *SoakResult) summarize(d time.Duration) error {
	first, last := r.Samples[0], r.Samples[len(r.Samples)-1]
	r.Done, r.JobsPerS = last.Done, float64(last.Done)/last.ElapsedS
	r.RedisCPUS = last.redisCPU - first.redisCPU
	if jobs := last.Done - first.Done; jobs > 0 {
		r.RedisCPUUsPerJob = r.RedisCPUS * 1e6 / float64(jobs)
	}
	var xs, ys []float64
	var half []SoakSample
	for _, s := range r.Samples {
		r.PeakBytes = max(r.PeakBytes, s.UsedMemory)
		if s.ElapsedS >= d.Seconds()/2 {
			xs, ys = append(xs, s.ElapsedS), append(ys, float64(s.UsedMemory))
			half = append(half, s)
		}
	}
	var ok bool
	if r.SlopeBytesPerS, ok = slope(xs, ys); !ok {
		return fmt.Errorf("only %d samples in the second half of the soak: give --soak-every at most a quarter of --soak", len(xs))
	}
	from, to := half[0], half[len(half)-1]
	r.SecondHalfPerS = float64(to.Done-from.Done) / (to.ElapsedS - from.ElapsedS)
	if r.SecondHalfPerS > 0 {
		r.SlopeBytesPerJob = r.SlopeBytesPerS / r.SecondHalfPerS
	}
	return nil
}

// produce keeps about backlog jobs enqueued and not yet handled, in
// batches of up to enqueueBatch, until ctx ends (then it answers nil).
// Several run at once, so that the pool never waits for one round trip of
// enqueues; each counts a batch as enqueued before it sends it, so that the
// backlog never reads below what Redis holds, and together they overshoot
// backlog by at most a batch each.
func produce(ctx context.Context, b *broker.Broker, q string, backlog int, enqueued, done *atomic.Int64, handled <-chan struct{}) error {
	payload := []byte(`{}`)
	batch := make([]broker.Job, 0, enqueueBatch)
	for {
		room := int64(backlog) - (enqueued.Load() - done.Load())
		// A batch at a time, not a job at a time: below a batch's worth of
		// room, wait for the pool to make more.
		if room < int64(min(enqueueBatch, backlog)) {
			select {
			case <-handled:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		batch = batch[:0]
		for range min(room, enqueueBatch) {
			batch = append(batch, broker.Job{Queue: q, Kind: "noop", Payload: payload})
		}
		enqueued.Add(int64(len(batch)))
		for _, res := range b.Client().EnqueueMany(ctx, batch) {
			if ctx.Err() != nil {
				return nil
			}
			if res.Err != nil {
				return res.Err
			}
		}
	}
}

// redisCPU answers the CPU Redis has used since it started, user and
// system, in seconds: used_cpu_user + used_cpu_sys of INFO cpu (the whole
// process, its background threads included).
func redisCPU(info string) (float64, error) {
	var sum float64
	for _, field := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, ok := infoValue(info, field)
		if !ok {
			return 0, fmt.Errorf("INFO cpu has no %s", field)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s:%s: %w", field, v, err)
		}
		sum += f
	}
	return sum, nil
}

// infoValue answers the value of one "field:value" line of an INFO reply.
func infoValue(info, field string) (string, bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, true
		}
	}
	return "", false
}

// slope is the least-squares slope of ys over xs, and false when xs holds
// fewer than two distinct values (then no line fits).
func slope(xs, ys []float64) (float64, bool) {
	if len(xs) != len(ys) || len(xs) < 2 {
		return 0, false
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0, false
	}
	return sxy / sxx, true
}

func printSoakHeader(w io.Writer) {
	fmt.Fprintf(w, "%9s  %13s  %11s  %9s  %8s  %9s\n", "elapsed", "used_memory", "done", "jobs/s", "backlog", "kept")
}

func printSoakSample(w io.Writer, s SoakSample) {
	fmt.Fprintf(w, "%8.1fs  %13d  %11d  %9.0f  %8d  %9d\n", s.ElapsedS, s.UsedMemory, s.Done, s.JobsPerS, s.Backlog, s.Kept)
}

func printSoak(w io.Writer, r SoakResult) {
	fmt.Fprintf(w, "soak %s, concurrency %d, retention %s, backlog ~%d\n", time.Duration(r.DurationS*float64(time.Second)), r.Concurrency, r.Retention, r.BacklogTarget)
	fmt.Fprintf(w, "jobs done              %d (%.0f/s)\n", r.Done, r.JobsPerS)
	fmt.Fprintf(w, "used_memory at start   %d bytes (%.1f MB)\n", r.StartBytes, float64(r.StartBytes)/1e6)
	fmt.Fprintf(w, "used_memory peak       %d bytes (%.1f MB)\n", r.PeakBytes, float64(r.PeakBytes)/1e6)
	fmt.Fprintf(w, "slope, second half     %.0f bytes/s (%.2f MB/min), %.0f bytes per job done (%.0f jobs/s)\n",
		r.SlopeBytesPerS, r.SlopeBytesPerS*60/1e6, r.SlopeBytesPerJob, r.SecondHalfPerS)
	fmt.Fprintf(w, "Redis CPU per job      %.1f µs (%.2f s of used_cpu_user + used_cpu_sys; only meaningful on a Redis nothing else uses)\n",
		r.RedisCPUUsPerJob, r.RedisCPUS)
}
