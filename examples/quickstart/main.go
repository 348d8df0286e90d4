// Command quickstart is the smallest complete fenceq program: it defines
// two typed jobs, registers their handlers, enqueues a few, runs a worker
// pool, and shuts down gracefully on Ctrl-C (releasing any job still
// running so another worker takes it at once).
//
//	go run ./examples/quickstart                      # $REDIS_URL, else 127.0.0.1:6379
//	go run ./examples/quickstart -redis host:port
//	go run ./examples/quickstart -redis redis://127.0.0.1:40123   # what `workerd dev` prints
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// WelcomeArgs are the arguments of a welcome email. The type names its
// kind, so producer and handler cannot disagree on it; the job's payload
// is the value's JSON.
type WelcomeArgs struct {
	Email string `json:"email"`
	Name  string `json:"name"`
}

// Kind returns a constant: handlers.Register calls it on the zero value.
func (WelcomeArgs) Kind() string { return "welcome_email" }

// ResizeArgs are the arguments of an image resize, with default options.
type ResizeArgs struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

// Kind names the job kind.
func (ResizeArgs) Kind() string { return "resize_image" }

// EnqueueOptions are every resize job's defaults: five attempts, and one
// job per image and width while it waits or runs (the unique key is
// computed from the value).
func (a ResizeArgs) EnqueueOptions() broker.EnqueueOptions {
	return broker.EnqueueOptions{MaxAttempts: 5, UniqueKey: "resize-" + a.Image + "-" + strconv.Itoa(a.Width)}
}

func main() {
	addr := flag.String("redis", cmp.Or(os.Getenv("REDIS_URL"), "127.0.0.1:6379"), "Redis address: host:port or a URL redis://[user:password@]host:port[/db] (default $REDIS_URL, else 127.0.0.1:6379)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opt, err := redisOptions(*addr)
	if err != nil {
		log.Error("quickstart: bad -redis", "error", err)
		os.Exit(2)
	}
	if err := run(opt, log); err != nil {
		log.Error("quickstart failed", "error", err)
		os.Exit(1)
	}
}

// redisOptions reads a Redis address as host:port, or as a URL such as
// the redis://127.0.0.1:40123 that `workerd dev` prints.
func redisOptions(addr string) (*redis.Options, error) {
	if strings.Contains(addr, "://") {
		opt, err := redis.ParseURL(addr)
		if err != nil {
			return nil, fmt.Errorf("%q: %w; write host:port or redis://host:port", addr, err)
		}
		return opt, nil
	}
	return &redis.Options{Addr: addr}, nil
}

func run(opt *redis.Options, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rdb := redis.NewClient(opt)
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{Prefix: "fenceq-quickstart"})
	if err != nil {
		return err
	}

	mux := handlers.NewMux()
	// Each handler is registered by its args type: the payload arrives
	// decoded, and one that does not decode fails the job permanently.
	handlers.Register(mux, func(ctx context.Context, job *handlers.Job, args WelcomeArgs) error {
		// Pass (job.ID, job.Generation) to systems you write to, so that
		// they can refuse a stale worker's write.
		log.Info("sending welcome email", "to", args.Email, "name", args.Name, "job", job.ID, "fencing_token", job.Generation)
		job.SetResult([]byte(`{"sent":true}`))
		return nil
	})
	// This one fails twice before it succeeds: retried with backoff, and
	// its progress stored on the job.
	handlers.Register(mux, func(ctx context.Context, job *handlers.Job, args ResizeArgs) error {
		if err := job.Progress(ctx, []byte(`{"step":"resizing"}`)); err != nil {
			return err // the lease was lost: stop
		}
		if job.Attempt < 3 {
			return errors.New("image service busy")
		}
		log.Info("image resized", "image", args.Image, "width", args.Width, "job", job.ID, "attempt", job.Attempt)
		return nil
	})

	pool, err := worker.New(b, mux, worker.Config{
		Concurrency: 5,
		Backoff:     worker.ExponentialBackoff(200*time.Millisecond, 5*time.Second),
		Logger:      log,
	})
	if err != nil {
		return err
	}

	// Typed jobs with no queue go to broker.QueueDefault, the queue a pool
	// with no queues configured reads.
	for _, name := range []string{"Ada", "Grace", "Edsger"} {
		if _, err := b.Client().EnqueueArgs(ctx, WelcomeArgs{Email: name + "@example.com", Name: name}, nil); err != nil {
			return err
		}
	}
	resize := ResizeArgs{Image: "cat.png", Width: 640}
	id, err := b.Client().EnqueueArgs(ctx, resize, nil)
	if err != nil && !errors.Is(err, broker.ErrUniqueHeld) {
		return err
	}
	// Asking twice is harmless: the unique key answers the job that holds it.
	again, err := b.Client().EnqueueArgs(ctx, resize, nil)
	log.Info("resize enqueued once", "job", id, "second_enqueue_answered", again, "held", errors.Is(err, broker.ErrUniqueHeld))

	log.Info("running; press Ctrl-C to stop")
	return pool.Run(ctx) // blocks until Ctrl-C, then shuts down gracefully
}
