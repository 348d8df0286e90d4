package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// Handler runs one job. Returning nil settles it as done; an error retries
// it with backoff, unless it wraps a *PermanentError (dead now) or is a
// *SnoozeError (run later, attempt not charged). A handler must stop when
// its context is cancelled; context.Cause says why.
//
// Delivery is at least once: after a crash a job runs again, so handlers
// must be idempotent.
type Handler interface {
	ProcessJob(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) error

// ProcessJob calls f.
func (f HandlerFunc) ProcessJob(ctx context.Context, job *Job) error { return f(ctx, job) }

// Mux routes each job to the handler registered for its kind. For a job of
// an unregistered kind it returns an *UnknownKindError, which a worker pool
// does not count as a failure: it gives the job back, uncharged, to wait
// for a pool that has the kind (worker.Config.UnknownKind), so the old
// pools of a rolling deploy leave the new kinds' jobs alone. Only while no
// handler ran: once a Mux passed the job to a registered handler, an
// UnknownKindError that handler returns (a Mux nested in it lacks the
// kind) fails the job like any error (see [NoHandler]). It is safe for
// concurrent use; registering while a pool runs is allowed.
type Mux struct {
	mu    sync.RWMutex
	kinds map[string]Handler
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{kinds: map[string]Handler{}} }

// Handle registers h for kind. It panics on an empty kind, a nil handler or
// a kind registered twice: those are programming errors at startup.
func (m *Mux) Handle(kind string, h Handler) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case kind == "":
		panic("fenceq: Mux.Handle: empty kind")
	case h == nil:
		panic("fenceq: Mux.Handle: nil handler for kind " + kind)
	case m.kinds[kind] != nil:
		panic("fenceq: Mux.Handle: kind " + kind + " registered twice")
	}
	if m.kinds == nil {
		m.kinds = map[string]Handler{}
	}
	m.kinds[kind] = h
}

// HandleFunc registers fn for kind.
func (m *Mux) HandleFunc(kind string, fn func(ctx context.Context, job *Job) error) {
	if fn == nil {
		panic("fenceq: Mux.HandleFunc: nil function for kind " + kind)
	}
	m.Handle(kind, HandlerFunc(fn))
}

// Kinds lists the registered kinds, sorted.
func (m *Mux) Kinds() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Sorted(maps.Keys(m.kinds))
}

// ProcessJob runs the handler of job.Kind, and marks job as dispatched to
// it: from then on an UnknownKindError for the job, from a Mux nested in
// that handler, is the handler's failure (see [NoHandler]).
func (m *Mux) ProcessJob(ctx context.Context, job *Job) error {
	m.mu.RLock()
	h := m.kinds[job.Kind]
	m.mu.RUnlock()
	if h == nil {
		return Permanent(&UnknownKindError{Kind: job.Kind})
	}
	job.dispatched = true
	return h.ProcessJob(ctx, job)
}

// JSON adapts a function of typed arguments to a Handler: the payload is
// decoded into a T (unknown fields are allowed, as in encoding/json), and a
// payload that does not decode fails the job permanently with the reason,
// since retrying cannot fix it.
//
//	mux.Handle("email", handlers.JSON(func(ctx context.Context, job *handlers.Job, args EmailArgs) error { … }))
//
// A type that names its kind (a Kind method) is registered with [Register].
func JSON[T any](fn func(ctx context.Context, job *Job, args T) error) Handler {
	return HandlerFunc(func(ctx context.Context, job *Job) error {
		var args T
		if err := json.Unmarshal(job.Payload, &args); err != nil {
			return Permanent(fmt.Errorf("decode %s payload as %T: %w", job.Kind, args, err))
		}
		return fn(ctx, job, args)
	})
}
