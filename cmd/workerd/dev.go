package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

const devQueue = "demo"

// runDev runs everything in one process: an embedded in-memory Redis, a
// pool with demo handlers, and a trickle of demo jobs, with a live count.
func runDev(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "dev", "[flags]")
	var lf logFlags
	lf.register(fs)
	fs.Lookup("log-level").DefValue, lf.level = "error", "error" // the counter is the show; logs only for trouble
	jobs := fs.Int("jobs", 20, "demo jobs to enqueue at start (more follow every second)")
	exitAfter := fs.Duration("exit-after", 0, "stop by itself after this long (default: run until Ctrl-C)")
	if _, err := parse(fs, "[flags]", args, 0, 0); err != nil {
		return err
	}
	log, err := lf.logger(e.stderr)
	if err != nil {
		return err
	}
	if *exitAfter > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *exitAfter)
		defer cancel()
	}

	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return fmt.Errorf("start the embedded Redis: %w", err)
	}
	defer mr.Close()
	url := "redis://" + mr.Addr()
	fmt.Fprintf(e.stdout, "workerd dev: embedded Redis at %s (in memory, NOT durable: everything is gone when this process exits)\n", url)
	fmt.Fprintf(e.stdout, "  from another terminal:  go run ./cmd/workerd inspect %s --redis %s\n", devQueue, url)
	fmt.Fprintf(e.stdout, "                          go run ./cmd/workerd enqueue %s demo.greet --payload '{\"name\":\"you\"}' --redis %s\n", devQueue, url)
	fmt.Fprintln(e.stdout, "  Ctrl-C stops gracefully.")

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		return err
	}
	dash, stopDash, err := devDashboard(e, b, log)
	if err != nil {
		return err
	}
	defer stopDash()
	fmt.Fprintln(e.stdout, dash)
	pool, err := worker.New(b, demoMux(), worker.Config{
		Queues: []worker.Queue{{Name: devQueue}}, Concurrency: 4, LeaseDuration: 5 * time.Second,
		Backoff: worker.ExponentialBackoff(500*time.Millisecond, 5*time.Second), Logger: log,
	})
	if err != nil {
		return err
	}
	if err := pool.Start(ctx); err != nil {
		return err
	}
	for range *jobs {
		if err := enqueueDemo(ctx, b); err != nil {
			return err
		}
	}

	tty := isTerminal(e.stdout)
	show := time.NewTicker(250 * time.Millisecond)
	defer show.Stop()
	more := time.NewTicker(time.Second)
	defer more.Stop()
	lastLine := time.Time{}
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-more.C:
			for range 1 + rand.IntN(3) {
				if err := enqueueDemo(ctx, b); err != nil && ctx.Err() == nil {
					return err
				}
			}
		case <-show.C:
			if tty || time.Since(lastLine) >= 2*time.Second {
				lastLine = time.Now()
				printCounts(ctx, e, b, tty)
			}
		}
	}
	if tty {
		fmt.Fprintln(e.stdout) // end the line the counter kept redrawing
	}
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = pool.Shutdown(sctx)
	printCounts(sctx, e, b, false)
	fmt.Fprintln(e.stdout, "workerd dev: stopped")
	return err
}

func printCounts(ctx context.Context, e *env, b *broker.Broker, overwrite bool) {
	c, err := b.Counts(ctx, devQueue)
	if err != nil {
		return
	}
	line := fmt.Sprintf("pending %-4d scheduled %-4d running %-2d done %-6d dead %-4d cancelled %d",
		c.Pending, c.Scheduled, c.Running, c.Done, c.Dead, c.Cancelled)
	if overwrite {
		fmt.Fprintf(e.stdout, "\r\033[K%s", line)
		return
	}
	fmt.Fprintln(e.stdout, line)
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

func enqueueDemo(ctx context.Context, b *broker.Broker) error {
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
	_, err := b.Enqueue(ctx, j)
	return err
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
