package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/internal/version"
	"github.com/fenceq/fenceq/worker"
)

const (
	devQueue = "demo"
	// devBatch is how many of --jobs go to Redis in one round trip.
	devBatch = 500
	// devShutdownTimeout is how long running demo jobs may finish at the
	// end; none takes more than about 1.5 s.
	devShutdownTimeout = 5 * time.Second
	// devEvents is about how many lifecycle events dev keeps, for
	// 'inspect demo --follow' and the job pages.
	devEvents = 10_000
	// devFlows is how many chains of dependent jobs dev enqueues at start.
	devFlows = 3
)

// errTimeUp ends dev at --exit-after: what the user asked for, not an
// error.
var errTimeUp = errors.New("--exit-after reached")

// runDev runs everything in one process: an embedded in-memory Redis, a
// pool with demo handlers, and a trickle of demo jobs, with a live count.
func runDev(ctx context.Context, e *env, args []string) error {
	o, err := parseDevFlags(e, args)
	if err != nil {
		return err
	}
	log, err := o.log.logger(e.stderr)
	if err != nil {
		return err
	}
	log.Info("workerd dev starting", slog.String("version", version.String()))
	start := time.Now()
	// ctx is the user's stop (Ctrl-C); work stops at that or at --exit-after.
	work := ctx
	if o.exitAfter > 0 {
		var cancel context.CancelFunc
		work, cancel = context.WithTimeoutCause(ctx, o.exitAfter, errTimeUp)
		defer cancel()
	}
	mr, err := startEmbeddedRedis(e)
	if err != nil {
		return err
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		return err
	}
	if err := b.Inspector().SetEvents(ctx, devQueue, devEvents); err != nil {
		return fmt.Errorf("turn on the demo queue's events: %w", err)
	}
	dash, stopDash, err := devDashboard(e, b, log)
	if err != nil {
		return err
	}
	defer stopDash()
	fmt.Fprintln(e.stdout, dash)
	pool, err := startDemoPool(ctx, b, log)
	if err != nil {
		return err
	}
	d := newDemo(e, b, o.jobs, start)
	failed := d.loop(work)
	return cmp.Or(failed, d.stop(work, pool, o.exitAfter, log))
}

// devFlags are dev's command line.
type devFlags struct {
	log       logFlags
	jobs      int           // demo jobs enqueued at start
	exitAfter time.Duration // 0: run until Ctrl-C
}

func parseDevFlags(e *env, args []string) (*devFlags, error) {
	fs := newFlags(e, "dev", "[flags]")
	o := &devFlags{}
	o.log.register(fs)
	fs.Lookup("log-level").DefValue, o.log.level = "error", "error" // the counter is the show; logs only for trouble
	fs.IntVar(&o.jobs, "jobs", 20, "demo jobs to enqueue at start (more follow every second)")
	fs.DurationVar(&o.exitAfter, "exit-after", 0, "stop by itself after this long, with a summary (default: run until Ctrl-C)")
	if _, err := parse(fs, "[flags]", args, 0, 0); err != nil {
		return nil, err
	}
	switch {
	case o.jobs < 0:
		return nil, usagef("--jobs %d: give 0 or more", o.jobs)
	case o.exitAfter < 0:
		return nil, usagef("--exit-after %v: give a positive duration such as 30s, or leave it out to run until Ctrl-C", o.exitAfter)
	}
	return o, nil
}

// startEmbeddedRedis starts miniredis on a free local port and tells the
// user how to reach it from another terminal.
func startEmbeddedRedis(e *env) (*miniredis.Miniredis, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("start the embedded Redis: %w", err)
	}
	url := "redis://" + mr.Addr()
	fmt.Fprintf(e.stdout, "workerd dev (fenceq %s): embedded Redis at %s (in memory, NOT durable: everything is gone when this process exits)\n", version.String(), url)
	fmt.Fprintf(e.stdout, "  from another terminal:  go run ./cmd/workerd inspect %s --redis %s\n", devQueue, url)
	fmt.Fprintf(e.stdout, "                          go run ./cmd/workerd enqueue %s demo.greet --payload '{\"name\":\"you\"}' --redis %s\n", devQueue, url)
	fmt.Fprintln(e.stdout, "  Ctrl-C stops gracefully.")
	return mr, nil
}

// startDemoPool starts a pool of the demo handlers on the demo queue. It
// runs until ctx (the user's stop) ends, not --exit-after: stop shuts it
// down.
func startDemoPool(ctx context.Context, b *broker.Broker, log *slog.Logger) (*worker.Pool, error) {
	pool, err := worker.New(b, demoMux(), worker.Config{
		Queues: []worker.Queue{{Name: devQueue}}, Concurrency: 4, LeaseDuration: 5 * time.Second,
		Backoff: worker.ExponentialBackoff(500*time.Millisecond, 5*time.Second), Logger: log,
		ShutdownTimeout: devShutdownTimeout,
	})
	if err != nil {
		return nil, err
	}
	if err := pool.Start(ctx); err != nil {
		return nil, err
	}
	return pool, nil
}

// demo is the show of one dev run: the seeding of --jobs, the trickle
// that follows, and the counter line redrawn as they are handled.
type demo struct {
	e      *env
	b      *broker.Broker
	jobs   int       // --jobs
	start  time.Time // of the run
	tty    bool      // the counter redraws one line in place
	counts *counter

	seededN  atomic.Int64 // of the --jobs, enqueued so far
	extra    int          // the trickle that follows
	seeded   chan error   // the seeding's end; nil once received
	seeding  bool
	lastLine time.Time // when the counter last printed; zero once its line is ended
}

func newDemo(e *env, b *broker.Broker, jobs int, start time.Time) *demo {
	return &demo{
		e: e, b: b, jobs: jobs, start: start,
		tty:    isTerminal(e.stdout),
		counts: &counter{width: max(4, len(strconv.Itoa(jobs)))},
		seeded: make(chan error, 1),
	}
}

// loop seeds the first jobs in batches while the pool already works and
// the counter already shows them arriving, adds a few more every second,
// and shows the counts, until work ends. It answers an enqueue that
// failed while work went on.
func (d *demo) loop(work context.Context) error {
	seeded := d.seeded
	d.seeding = d.jobs > 0
	if d.seeding {
		n, err := seedFlows(work, d.b)
		d.extra += n
		if err != nil && work.Err() == nil {
			return fmt.Errorf("enqueue the demo's dependent jobs: %w", err)
		}
		fmt.Fprintf(d.e.stdout, "workerd dev: events on ('inspect %s --follow' shows them); %d jobs blocked until another is done: %d greetings after their resize, and one after a job that dies, so it is cancelled\n",
			devQueue, devFlows+1, devFlows)
		fmt.Fprintf(d.e.stdout, "workerd dev: enqueueing %d demo jobs, %d per round trip; more follow every second\n", d.jobs, devBatch)
	}
	go func() { seeded <- seed(work, d.b, d.jobs, &d.seededN) }()
	show := time.NewTicker(250 * time.Millisecond)
	defer show.Stop()
	more := time.NewTicker(time.Second)
	defer more.Stop()
	defer d.endLine()
	for {
		select {
		case <-work.Done():
			return nil
		case err := <-d.seeded:
			if err := d.seedingEnded(work, err); err != nil {
				return err
			}
		case <-more.C:
			if err := d.trickle(work); err != nil {
				return err
			}
		case <-show.C:
			d.show(work)
		}
	}
}

// seedingEnded reports the end of the seeding, unless it was cut short
// (then the summary counts what went in); a failure is the loop's end.
func (d *demo) seedingEnded(work context.Context, err error) error {
	d.seeded, d.seeding = nil, false
	if err != nil && work.Err() == nil {
		return fmt.Errorf("enqueue the demo jobs: %w", err)
	}
	if err != nil || work.Err() != nil {
		return nil
	}
	d.endLine()
	fmt.Fprintf(d.e.stdout, "workerd dev: enqueued %d demo jobs in %v\n", d.jobs, time.Since(d.start).Round(time.Millisecond))
	return nil
}

// trickle enqueues one to three more demo jobs.
func (d *demo) trickle(work context.Context) error {
	for range 1 + rand.IntN(3) {
		if _, err := d.b.Client().Enqueue(work, demoJob()); err != nil {
			if work.Err() == nil {
				return fmt.Errorf("enqueue a demo job: %w", err)
			}
			return nil
		}
		d.extra++
	}
	return nil
}

// show prints the counts: redrawn in place on a terminal, else a line
// every 2 s at most.
func (d *demo) show(work context.Context) {
	if !d.tty && time.Since(d.lastLine) < 2*time.Second {
		return
	}
	d.lastLine = time.Now()
	line, err := d.counts.read(work, d.b)
	if err != nil {
		return
	}
	if d.seeding {
		line += fmt.Sprintf("  (enqueueing: %d of %d)", d.seededN.Load(), d.jobs)
	}
	if d.tty {
		fmt.Fprintf(d.e.stdout, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(d.e.stdout, line)
	}
}

// endLine ends the line the counter keeps redrawing.
func (d *demo) endLine() {
	if d.tty && !d.lastLine.IsZero() {
		fmt.Fprintln(d.e.stdout)
		d.lastLine = time.Time{}
	}
}

// stop shuts the pool down, says why, and prints the last counts and a
// summary.
func (d *demo) stop(work context.Context, pool *worker.Pool, exitAfter time.Duration, log *slog.Logger) error {
	why := "stopping"
	if errors.Is(context.Cause(work), errTimeUp) {
		why = fmt.Sprintf("stopping after %v (--exit-after)", exitAfter)
	}
	fmt.Fprintf(d.e.stdout, "workerd dev: %s: running jobs have up to %v to finish (%v at most in all); Ctrl-C again stops at once\n",
		why, devShutdownTimeout, devShutdownTimeout+shutdownSlack)
	err := shutdown([]*worker.Pool{pool}, devShutdownTimeout, d.e.hurry, log)
	if d.seeded != nil {
		<-d.seeded // work is done: at most the batch in flight is still going in
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	took := time.Since(d.start)
	summary := ""
	if n, err := d.b.Inspector().Counts(sctx, devQueue); err == nil {
		fmt.Fprintln(d.e.stdout, d.counts.line(n))
		summary = fmt.Sprintf("; %d done, %d dead, %.1f jobs done per second", n.Done, n.Dead, float64(n.Done)/took.Seconds())
	}
	fmt.Fprintf(d.e.stdout, "workerd dev: stopped after %v; %d demo jobs enqueued%s\n", took.Round(100*time.Millisecond), d.seededN.Load()+int64(d.extra), summary)
	return err
}

// seed enqueues n demo jobs, devBatch per round trip, counting them into
// enqueued as they are stored. It stops early when ctx ends.
func seed(ctx context.Context, b *broker.Broker, n int, enqueued *atomic.Int64) error {
	for left := n; left > 0 && ctx.Err() == nil; {
		batch := make([]broker.Job, min(left, devBatch))
		for i := range batch {
			batch[i] = demoJob()
		}
		for _, r := range b.Client().EnqueueMany(ctx, batch) {
			if r.Err != nil {
				return r.Err
			}
			enqueued.Add(1)
		}
		left -= len(batch)
	}
	return nil
}

// seedFlows enqueues the demo's jobs with dependencies: devFlows resizes,
// each followed by a greeting that runs once it is done, and a greeting
// without a name (it goes dead) followed by one that is then cancelled.
// It answers how many jobs it enqueued.
func seedFlows(ctx context.Context, b *broker.Broker) (int, error) {
	var parents, children []broker.Job
	for i := range devFlows {
		id := fmt.Sprintf("flow-%d-%s", i+1, broker.NewRequestID()[:8])
		parents = append(parents, broker.Job{Queue: devQueue, ID: id + "-resize", Kind: "demo.resize", Payload: []byte(`{"image":"cat.png","width":640}`)})
		children = append(children, broker.Job{Queue: devQueue, ID: id + "-greet", Kind: "demo.greet", Payload: []byte(`{"name":"the resize's owner"}`), DependsOn: []string{id + "-resize"}})
	}
	id := "flow-dies-" + broker.NewRequestID()[:8]
	parents = append(parents, broker.Job{Queue: devQueue, ID: id, Kind: "demo.greet", Payload: []byte(`{}`)})
	children = append(children, broker.Job{Queue: devQueue, ID: id + "-after", Kind: "demo.greet", Payload: []byte(`{"name":"nobody"}`), DependsOn: []string{id}})
	n := 0
	// The parents first: a dependency must exist when its dependent is
	// enqueued.
	for _, batch := range [][]broker.Job{parents, children} {
		for _, r := range b.Client().EnqueueMany(ctx, batch) {
			if r.Err != nil {
				return n, r.Err
			}
			n++
		}
	}
	return n, nil
}

// counter formats a queue's counts as one line whose columns stay put from
// line to line: every number takes the same width, which grows (never
// shrinks) to the widest number seen.
type counter struct{ width int }

func (c *counter) read(ctx context.Context, b *broker.Broker) (string, error) {
	n, err := b.Inspector().Counts(ctx, devQueue)
	if err != nil {
		return "", err
	}
	return c.line(n), nil
}

func (c *counter) line(n broker.Counts) string {
	for _, v := range []int64{n.Pending, n.Scheduled, n.Blocked, n.Running, n.Done, n.Dead, n.Cancelled} {
		c.width = max(c.width, len(strconv.FormatInt(v, 10)))
	}
	w := c.width
	return fmt.Sprintf("pending %*d  scheduled %*d  blocked %*d  running %*d  done %*d  dead %*d  cancelled %*d",
		w, n.Pending, w, n.Scheduled, w, n.Blocked, w, n.Running, w, n.Done, w, n.Dead, w, n.Cancelled)
}

// demoMux holds the demo handlers: quick greetings, slower resizes that
// report progress, flaky jobs that succeed on a retry, and invalid jobs
// that go dead.
func demoMux() *handlers.Mux {
	type greet struct {
		Name string `json:"name"`
	}
	m := handlers.NewMux()
	m.Handle("demo.greet", handlers.JSON(func(ctx context.Context, j *handlers.Job, a greet) error {
		if a.Name == "" {
			return handlers.Permanent(errors.New("a greeting needs a name"))
		}
		j.SetResult([]byte(fmt.Sprintf(`{"greeting":"hello, %s"}`, a.Name)))
		return sleep(ctx, time.Duration(50+rand.IntN(250))*time.Millisecond)
	}))
	m.HandleFunc("demo.resize", func(ctx context.Context, j *handlers.Job) error {
		for pct := 25; pct <= 100; pct += 25 {
			if err := sleep(ctx, time.Duration(100+rand.IntN(300))*time.Millisecond); err != nil {
				return err
			}
			if err := j.Progress(ctx, []byte(fmt.Sprintf(`{"pct":%d}`, pct))); err != nil {
				return err
			}
		}
		return nil
	})
	m.HandleFunc("demo.flaky", func(ctx context.Context, j *handlers.Job) error {
		if j.Attempt == 1 {
			return errors.New("upstream timed out (demo: this one succeeds on its retry)")
		}
		return sleep(ctx, 100*time.Millisecond)
	})
	return m
}

// demoJob is a random demo job: mostly greetings (some without a name,
// which go dead), resizes, and flaky jobs.
func demoJob() broker.Job {
	names := []string{"Ada", "Grace", "Edsger", "Barbara", "Ken", "Frances", ""}
	var j broker.Job
	switch n := rand.IntN(10); {
	case n < 6:
		j = broker.Job{Kind: "demo.greet", Payload: []byte(fmt.Sprintf(`{"name":%q}`, names[rand.IntN(len(names))]))}
	case n < 8:
		j = broker.Job{Kind: "demo.resize", Payload: []byte(`{"image":"cat.png","width":640}`)}
	default:
		j = broker.Job{Kind: "demo.flaky", Payload: []byte(`{}`), MaxAttempts: 3}
	}
	j.Queue = devQueue
	return j
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
