package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrInvalid is wrapped by every [ValidationError].
	ErrInvalid = errors.New("invalid argument")
	// ErrJobExists is wrapped by [DuplicateError].
	ErrJobExists = errors.New("job id already exists")
	// ErrJobNotFound is returned when no job has the given id in the queue.
	ErrJobNotFound = errors.New("job not found")
	// ErrCorruptJob is wrapped by [CorruptJobError].
	ErrCorruptJob = errors.New("corrupt job")
	// ErrUniqueHeld is wrapped by [UniqueHeldError].
	ErrUniqueHeld = errors.New("unique key held by another job")
	// ErrWrongState is wrapped by [StateError].
	ErrWrongState = errors.New("job is in a state the operation does not take")
)

// StateError answers an operator's Delete, Promote or ReleaseUnowned of a
// job whose state the operation does not take (a running job to delete, a
// pending one to promote, a finished one to release), or that is no longer
// in the state the caller saw. Nothing was changed.
type StateError struct {
	Op        string // "delete", "promote" or "release"
	Queue, ID string
	State     State  // the job's state when the operation looked
	Seen      State  // the state the caller said it saw; "" when it named none
	Hint      string // what to do instead, e.g. "cancel it first"
}

func (e *StateError) Error() string {
	if e.Seen != "" && e.Seen != e.State {
		return fmt.Sprintf("fenceq: %s job %q in queue %q: it is %s now, not %s as seen; nothing changed, look at it again", e.Op, e.ID, e.Queue, e.State, e.Seen)
	}
	return fmt.Sprintf("fenceq: %s job %q in queue %q: it is %s; %s", e.Op, e.ID, e.Queue, e.State, e.Hint)
}

func (e *StateError) Unwrap() error { return ErrWrongState }

// ValidationError reports an argument the broker refuses before it reaches
// Redis. Nothing was written.
type ValidationError struct {
	Field  string // "queue", "kind", "id", "payload", "priority", ...
	Value  string // the offending value, shortened for display
	Reason string // what is wrong and what would be right
}

func (e *ValidationError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("fenceq: invalid %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("fenceq: invalid %s %q: %s", e.Field, e.Value, e.Reason)
}

func (e *ValidationError) Unwrap() error { return ErrInvalid }

// DuplicateError answers an Enqueue whose id is already taken. The existing
// job is untouched, so enqueueing with a chosen id is idempotent: a caller
// that retries after a timeout sees this error, not a second job.
type DuplicateError struct {
	Queue, ID string // the queue and the id already taken
	State     State  // the existing job's state
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("fenceq: job %q already exists in queue %q (state %s)", e.ID, e.Queue, e.State)
}

func (e *DuplicateError) Unwrap() error { return ErrJobExists }

// UniqueHeldError answers an Enqueue whose unique key another job holds.
// Nothing was written: the job the caller described is the holder, or runs
// as the holder. HolderID names it (Enqueue also returns it as its id).
type UniqueHeldError struct {
	Queue, Key, HolderID string // the queue, the unique key, and the id of the job holding it
	// HolderState is the holder's state, or "" when the holder has been
	// trimmed while its key's UniqueFor still runs.
	HolderState State
}

func (e *UniqueHeldError) Error() string {
	return fmt.Sprintf("fenceq: unique key %q in queue %q is held by job %q: nothing enqueued", e.Key, e.Queue, e.HolderID)
}

func (e *UniqueHeldError) Unwrap() error { return ErrUniqueHeld }

// CorruptJobError reports a job hash whose fields cannot be read: edited by
// hand, written by another program, or damaged. Scripts that meet such a job
// in an index mark it dead with the reason rather than drop it.
type CorruptJobError struct {
	Queue, ID string // where the job is
	Reason    string // what could not be read, e.g. a field that is not a number
}

func (e *CorruptJobError) Error() string {
	return fmt.Sprintf("fenceq: corrupt job %q in queue %q: %s", e.ID, e.Queue, e.Reason)
}

func (e *CorruptJobError) Unwrap() error { return ErrCorruptJob }

func notFound(queue, id string) error {
	return fmt.Errorf("fenceq: job %q in queue %q: %w", id, queue, ErrJobNotFound)
}

// transientPrefixes are the server's error replies that go away by
// themselves: a dataset loading, a failover, a replica read-only for now, a
// cluster reconfiguring, a script running long, a blocked client released.
var transientPrefixes = []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY", "NOREPLICAS", "UNBLOCKED"}

// IsTransient reports whether err, from any Broker method, is one that goes
// away by itself, so that sending the same request again later is right
// (every operation is safe to re-send, invariant 9): the network, a
// timeout, an exhausted connection pool, or a server that is loading,
// failing over or read-only for now. A refusal that retrying cannot fix —
// an invalid argument, a denied command (NOPERM), a script error — is not.
// An error wrapping ErrOutcomeUnknown (an *OutcomeUnknownError) is
// transient whatever its last send's error: the request may have run, and
// sending the same request again is how to learn what it did.
func IsTransient(err error) bool {
	var ne net.Error
	switch {
	case errors.Is(err, ErrOutcomeUnknown), errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.As(err, &ne):
		return true
	}
	for _, prefix := range transientPrefixes {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}
