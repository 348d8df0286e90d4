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

// Errors the other error types of this package wrap, for errors.Is.
var (
	// ErrInvalid is wrapped by every [ValidationError].
	ErrInvalid = errors.New("fenceq: invalid handler configuration")
	// ErrUnknownKind is wrapped by [UnknownKindError].
	ErrUnknownKind = errors.New("fenceq: no handler registered for the job's kind")
)

// ValidationError reports a configuration that a handler's constructor
// (exec.New, webhook.New) refuses; nothing was built. A program reads Field
// and Value; a person reads the message, which says what is wrong and what
// would be right.
type ValidationError struct {
	Handler string // the handler as messages name it: "exec send-email", "http handler"
	Field   string // the Config field: "Command", "Env", "KillGrace", "URL", "Timeout"
	Value   string // the offending value; "" when it is missing
	Reason  string // what is wrong and what would be right
	Err     error  // what the check found, if anything (a URL's parse error, exec.ErrDot, ...)
}

func (e *ValidationError) Error() string {
	if e.Err == nil {
		return e.Handler + ": " + e.Reason
	}
	return e.Handler + ": " + e.Reason + ": " + e.Err.Error()
}

// Unwrap answers ErrInvalid, and Err when there is one.
func (e *ValidationError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.Err}
}

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

// UnknownKindError says that no handler is registered for a job's kind. A
// worker pool gives the job back to wait for a pool that has the kind
// (worker.Config.UnknownKind) when [NoHandler] says so: Kind is the job's
// kind and no Mux passed the job to a handler. A handler that returns one
// for another kind (it routes further by a kind of its own), or that a Mux
// ran, fails the job like any error.
type UnknownKindError struct {
	Kind string // the job's kind
}

// NoHandler reports whether err, what a handler returned for job, says
// that no handler is there for the job: err is or wraps an
// *UnknownKindError naming job.Kind, and no [Mux] passed job to a handler
// registered for its kind. Such a job a worker pool gives back to wait for
// a pool that has the kind, uncharged. A router of one's own that returns
// an UnknownKindError without a Mux is believed; a handler a Mux ran is
// not, whatever a Mux nested in it returns, since its work may be done
// (a middleware that passes a copy of the Job on hides the Mux's mark).
func NoHandler(job *Job, err error) bool {
	var unknown *UnknownKindError
	return errors.As(err, &unknown) && unknown.Kind == job.Kind && !job.dispatched
}

func (e *UnknownKindError) Error() string {
	return fmt.Sprintf("no handler registered for kind %q: register one with Mux.Handle, or enqueue a kind this worker handles", e.Kind)
}

func (e *UnknownKindError) Unwrap() error { return ErrUnknownKind }
