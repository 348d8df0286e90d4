package handlers

import (
	"errors"
	"fmt"
	"time"
)

// Causes of a handler's cancelled context; read them with context.Cause.
var (
	// ErrLeaseLost: another claim replaced this one (the job was reaped,
	// force-released or re-claimed). The handler's result will not be
	// stored; it should stop at once.
	ErrLeaseLost = errors.New("fenceq: lease lost: another worker owns this job now")
	// ErrJobCancelled: the job's cancellation was requested. The handler
	// should stop; the job ends as cancelled.
	ErrJobCancelled = errors.New("fenceq: job cancelled")
	// ErrLeaseExpired: the lease could not be renewed (Redis unreachable)
	// before its locally measured deadline, so another worker may already
	// have it. The handler should stop.
	ErrLeaseExpired = errors.New("fenceq: lease expired: it could not be renewed in time")
	// ErrShutdown: the pool is shutting down and its grace period is over.
	// The job is released to run again elsewhere, without charging an attempt.
	ErrShutdown = errors.New("fenceq: worker shutting down")
)

// PermanentError marks a failure that retrying cannot fix (a malformed
// payload, a rejected request): the job is dead at once.
type PermanentError struct {
	Err error // the failure; nil reads as "permanent failure"
}

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "permanent failure"
	}
	return "permanent: " + e.Err.Error()
}
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the job goes dead now instead of retrying.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &PermanentError{Err: err}
}

// SnoozeError asks for the job to run again after a delay, without charging
// an attempt: the handler was not ready, nothing failed.
type SnoozeError struct {
	Delay time.Duration // from now until the job runs again; Snooze makes a negative one 0
}

func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %v", e.Delay) }

// Snooze returns an error that reschedules the job d from now without
// charging the attempt. A negative d counts as 0.
func Snooze(d time.Duration) error { return &SnoozeError{Delay: max(d, 0)} }

// UnknownKindError is the permanent failure of a job no handler is
// registered for.
type UnknownKindError struct {
	Kind string // the job's kind
}

func (e *UnknownKindError) Error() string {
	return fmt.Sprintf("no handler registered for kind %q: register one with Mux.Handle, or enqueue a kind this worker handles", e.Kind)
}
