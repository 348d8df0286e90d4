package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/jobrow"
	"github.com/fenceq/fenceq/middleware"
)

// Chain composes middleware so that the first is outermost, as with
// net/http wrappers. A pool applies its Config.Middleware the same way.
func ExampleChain() {
	trace := func(name string) middleware.Middleware {
		return func(next handlers.Handler) handlers.Handler {
			return handlers.HandlerFunc(func(ctx context.Context, j *handlers.Job) error {
				fmt.Println(name, "before")
				err := next.ProcessJob(ctx, j)
				fmt.Println(name, "after")
				return err
			})
		}
	}
	h := middleware.Chain(trace("outer"), trace("inner"))(handlers.HandlerFunc(
		func(ctx context.Context, j *handlers.Job) error {
			fmt.Println("handler runs", j.Kind)
			return nil
		}))

	// A pool builds the Job; here one is made by hand.
	_ = h.ProcessJob(context.Background(), &handlers.Job{Row: jobrow.Row{ID: "job-1", Queue: "images", Kind: "resize", Attempt: 1}})
	// Output:
	// outer before
	// inner before
	// handler runs resize
	// inner after
	// outer after
}

// Timeout cancels a handler's context when its kind's limit (or the
// default) passes, with ErrTimeout as the cause; the job then fails and is
// retried.
func ExampleTimeout() {
	h := middleware.Timeout(time.Minute, map[string]time.Duration{"resize": 10 * time.Millisecond})(handlers.HandlerFunc(
		func(ctx context.Context, j *handlers.Job) error {
			<-ctx.Done() // a handler that honours its context stops here
			fmt.Println("cause:", context.Cause(ctx))
			return ctx.Err()
		}))

	err := h.ProcessJob(context.Background(), &handlers.Job{Row: jobrow.Row{ID: "job-1", Queue: "images", Kind: "resize", Attempt: 1}})
	fmt.Println("error:", err)
	fmt.Println("deadline exceeded:", errors.Is(err, context.DeadlineExceeded))
	// Output:
	// cause: fenceq: job timed out
	// error: resize job exceeded its 10ms timeout: context deadline exceeded
	// deadline exceeded: true
}

// Logging logs the end of every job with its attributes (and its start at
// debug level). Here the time and duration are left out so that the
// output is the same on every run.
func ExampleLogging() {
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "duration" {
				return slog.Attr{}
			}
			return a
		},
	}))
	h := middleware.Logging(log)(handlers.HandlerFunc(func(ctx context.Context, j *handlers.Job) error {
		if j.Attempt == 1 {
			return errors.New("smtp: connection refused")
		}
		return nil
	}))

	job := &handlers.Job{Row: jobrow.Row{ID: "job-1", Queue: "emails", Kind: "welcome", Attempt: 1, Generation: 1}}
	_ = h.ProcessJob(context.Background(), job)
	job.Attempt, job.Generation = 2, 2 // its retry
	_ = h.ProcessJob(context.Background(), job)
	// Output:
	// level=WARN msg="job failed" job.queue=emails job.id=job-1 job.kind=welcome job.attempt=1 job.generation=1 error="smtp: connection refused"
	// level=INFO msg="job succeeded" job.queue=emails job.id=job-1 job.kind=welcome job.attempt=2 job.generation=2
}

// Recover turns a handler's panic into a *PanicError, which carries the
// stack. The pool always applies it outermost; put it first in a chain
// yourself to have logging or metrics see the panic as an error.
func ExampleRecover() {
	h := middleware.Recover()(handlers.HandlerFunc(func(ctx context.Context, j *handlers.Job) error {
		height := strings.Split(string(j.Payload), "x")[1] // a bug: the payload may hold no "x"
		fmt.Println("height", height)
		return nil
	}))

	job := &handlers.Job{Row: jobrow.Row{ID: "job-1", Queue: "images", Kind: "resize", Attempt: 1, Payload: []byte("640")}}
	err := h.ProcessJob(context.Background(), job)
	var p *middleware.PanicError
	if errors.As(err, &p) {
		fmt.Println("recovered:", p.Value)
	}
	// Output:
	// recovered: runtime error: index out of range [1] with length 1
}
