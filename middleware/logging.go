package middleware

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fenceq/fenceq/handlers"
)

// JobAttrs are a job's slog attributes: queue, id, kind, attempt and
// generation.
func JobAttrs(job *handlers.Job) slog.Attr {
	return slog.Group("job",
		slog.String("queue", job.Queue), slog.String("id", job.ID), slog.String("kind", job.Kind),
		slog.Int("attempt", job.Attempt), slog.Int64("generation", job.Generation))
}

// Logging logs each job's start (debug) and its end: info when it succeeds,
// warn when it fails, with the job's attributes, the duration and, when the
// context was cancelled, the cause. A job whose kind has no handler is
// logged at debug: the pool gives it back and warns once per kind.
func Logging(logger *slog.Logger) Middleware {
	if logger == nil {
		logger = slog.Default()
	}
	return func(next handlers.Handler) handlers.Handler {
		return handlers.HandlerFunc(func(ctx context.Context, job *handlers.Job) error {
			start := time.Now()
			logger.LogAttrs(ctx, slog.LevelDebug, "job started", JobAttrs(job))
			err := next.ProcessJob(ctx, job)
			attrs := []slog.Attr{JobAttrs(job), slog.Duration("duration", time.Since(start))}
			if cause := context.Cause(ctx); cause != nil {
				attrs = append(attrs, slog.String("cause", cause.Error()))
			}
			if err == nil {
				logger.LogAttrs(ctx, slog.LevelInfo, "job succeeded", attrs...)
				return nil
			}
			var snooze *handlers.SnoozeError
			if errors.As(err, &snooze) {
				logger.LogAttrs(ctx, slog.LevelInfo, "job snoozed", append(attrs, slog.Duration("delay", snooze.Delay))...)
				return err
			}
			if handlers.NoHandler(job, err) {
				// The pool gives it back to wait, and warns once per kind.
				logger.LogAttrs(ctx, slog.LevelDebug, "job has no handler for its kind", attrs...)
				return err
			}
			logger.LogAttrs(ctx, slog.LevelWarn, "job failed", append(attrs, slog.String("error", err.Error()))...)
			return err
		})
	}
}
