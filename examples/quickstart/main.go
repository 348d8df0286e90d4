// Command quickstart is the smallest complete fenceq program: it registers
// two handlers, enqueues a few jobs, runs a worker pool, and shuts down
// gracefully on Ctrl-C (releasing any job still running so another worker
// takes it at once).
//
//	go run ./examples/quickstart                      # Redis at 127.0.0.1:6379
//	go run ./examples/quickstart -redis host:port
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// WelcomeArgs is the payload of a "welcome_email" job.
type WelcomeArgs struct {
	Email string `json:"email"`
	Name  string `json:"name"`
}

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*addr, log); err != nil {
		log.Error("quickstart failed", "error", err)
		os.Exit(1)
	}
}

func run(addr string, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{Prefix: "fenceq-quickstart"})
	if err != nil {
		return err
	}

	mux := handlers.NewMux()
	// A typed handler: the payload arrives decoded; a payload that does not
	// decode fails the job permanently.
	mux.Handle("welcome_email", handlers.JSON(func(ctx context.Context, job *handlers.Job, args WelcomeArgs) error {
		// Pass (job.ID, job.Generation) to systems you write to, so that
		// they can refuse a stale worker's write.
		log.Info("sending welcome email", "to", args.Email, "job", job.ID, "fencing_token", job.Generation)
		job.SetResult([]byte(`{"sent":true}`))
		return nil
	}))
	// A plain handler that fails twice before it succeeds: retried with
	// backoff, and its progress stored on the job.
	mux.HandleFunc("resize_image", func(ctx context.Context, job *handlers.Job) error {
		if err := job.Progress(ctx, []byte(`{"step":"resizing"}`)); err != nil {
			return err // the lease was lost: stop
		}
		if job.Attempt < 3 {
			return errors.New("image service busy")
		}
		log.Info("image resized", "job", job.ID, "attempt", job.Attempt)
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

	for i, name := range []string{"Ada", "Grace", "Edsger"} {
		payload := fmt.Sprintf(`{"email":"user%d@example.com","name":%q}`, i, name)
		if _, err := b.Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "welcome_email", Payload: []byte(payload)}); err != nil {
			return err
		}
	}
	if _, err := b.Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "resize_image", MaxAttempts: 5}); err != nil {
		return err
	}

	log.Info("running; press Ctrl-C to stop")
	return pool.Run(ctx) // blocks until Ctrl-C, then shuts down gracefully
}
