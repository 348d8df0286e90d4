package handlers

import (
	"context"
	"errors"
	"maps"
)

// Job is one claimed job as a handler sees it.
type Job struct {
	ID, Queue, Kind string // the job's id, its queue, and the kind that chose this handler
	Payload         []byte // as enqueued; decode it yourself, or use JSON
	Attempt         int    // 1 on the first run
	MaxAttempts     int    // attempts allowed in all: when Attempt equals it, a failure is dead
	// Generation is this claim's lease generation. With ID it is the job's
	// fencing token: every later claim of the job carries a larger one, so
	// an external system that stores the largest generation it has applied
	// can refuse a stale worker's write (UPDATE … WHERE fence < $generation).
	Generation int64
	// Metadata is the job's small string headers (broker.Job.Metadata:
	// trace context, a request id, a tenant); nil when it has none. It is
	// this Job's own copy: changing it changes neither what is stored nor
	// what the worker or its middleware read from the claim.
	Metadata map[string]string

	progress func(ctx context.Context, data []byte) error
	result   []byte
	// dispatched: a Mux passed the job to the handler registered for its
	// kind, so a handler ran and NoHandler is false.
	dispatched bool
}

// JobSpec describes the Job that NewJob builds: what the worker read from
// the claim, and how Progress reaches Redis.
type JobSpec struct {
	ID, Queue, Kind string
	Payload         []byte
	Attempt         int // 1 on the first run
	MaxAttempts     int
	Generation      int64             // the claim's lease generation, its fencing token with ID
	Metadata        map[string]string // the job's metadata; NewJob copies it
	// Progress stores a progress report, fenced by the claim. nil means
	// none: Job.Progress then returns an error.
	Progress func(ctx context.Context, data []byte) error
}

// NewJob builds the Job that spec describes. The worker package builds
// every Job it runs with it; a handler's unit test can too, naming only the
// fields the handler reads.
func NewJob(spec JobSpec) *Job {
	return &Job{ID: spec.ID, Queue: spec.Queue, Kind: spec.Kind, Payload: spec.Payload, Attempt: spec.Attempt,
		MaxAttempts: spec.MaxAttempts, Generation: spec.Generation, progress: spec.Progress,
		Metadata: maps.Clone(spec.Metadata)} // nil stays nil: no allocation for a job without metadata
}

// Progress stores a progress report (any bytes; JSON is a good choice) on
// the job, fenced by this claim: it returns ErrLeaseLost, and stores
// nothing, once another claim has replaced this one.
func (j *Job) Progress(ctx context.Context, data []byte) error {
	if j.progress == nil {
		return errors.New("fenceq: this job has no progress reporter")
	}
	return j.progress(ctx, data)
}

// SetResult sets what is stored as the job's result when the handler
// returns nil. A result set by a worker whose lease was lost is not stored.
func (j *Job) SetResult(data []byte) { j.result = data }

// Result is what SetResult set.
func (j *Job) Result() []byte { return j.result }

type jobKey struct{}

// WithJob returns a context that carries job, for JobFromContext.
func WithJob(ctx context.Context, job *Job) context.Context {
	return context.WithValue(ctx, jobKey{}, job)
}

// JobFromContext returns the job a handler's context belongs to: deep in a
// call stack, it gives the id, kind, attempt and fencing token without
// threading the Job through.
func JobFromContext(ctx context.Context) (*Job, bool) {
	j, ok := ctx.Value(jobKey{}).(*Job)
	return j, ok
}
