package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fenceq/fenceq/handlers"
)

// ErrTimeout is the cause of a handler context cancelled by Timeout.
var ErrTimeout = errors.New("fenceq: job timed out")

// Timeout bounds each job's run: perKind[kind] when set, else def. A zero
// or negative duration means no limit. The handler's context is cancelled
// with ErrTimeout as its cause, and a handler that returns the context's
// error reports a failure naming the limit (the job is retried).
func Timeout(def time.Duration, perKind map[string]time.Duration) Middleware {
	return func(next handlers.Handler) handlers.Handler {
		return handlers.HandlerFunc(func(ctx context.Context, job *handlers.Job) error {
			d, ok := perKind[job.Kind]
			if !ok {
				d = def
			}
			if d <= 0 {
				return next.ProcessJob(ctx, job)
			}
			ctx, cancel := context.WithTimeoutCause(ctx, d, ErrTimeout)
			defer cancel()
			err := next.ProcessJob(ctx, job)
			if err != nil && errors.Is(context.Cause(ctx), ErrTimeout) {
				return fmt.Errorf("%s job exceeded its %v timeout: %w", job.Kind, d, err)
			}
			return err
		})
	}
}
