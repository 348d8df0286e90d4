package middleware

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/fenceq/fenceq/handlers"
)

// PanicError is a handler's panic, turned into an error that carries the
// stack: the job fails (and retries) with the stack in its last_error.
type PanicError struct {
	Value any    // what the handler passed to panic
	Stack []byte // the panicking goroutine's stack, as debug.Stack prints it
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("panic: %v\n\n%s", e.Value, e.Stack)
}

// Recover turns a panic in the handler into a *PanicError. The worker pool
// always applies it outermost; add it yourself to have other middleware
// (logging, metrics) see a panic as an error.
func Recover() Middleware {
	return func(next handlers.Handler) handlers.Handler {
		return handlers.HandlerFunc(func(ctx context.Context, job *handlers.Job) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = &PanicError{Value: v, Stack: debug.Stack()}
				}
			}()
			return next.ProcessJob(ctx, job)
		})
	}
}
