package handlers

import (
	"context"
	"errors"
	"maps"

	"github.com/fenceq/fenceq/jobrow"
)

// Job is one claimed job as a handler sees it: the claim's [jobrow.Row]
// (job.ID, job.Kind, job.Payload, job.Attempt …), a fenced Progress
// reporter and the result to store. Payload is as enqueued: decode it
// yourself, or use JSON. Generation with ID is the job's fencing token:
// every later claim of the job carries a larger one, so an external system
// that stores the largest generation it has applied can refuse a stale
// worker's write (UPDATE … WHERE fence < $generation). Metadata (trace
// context, a request id, a tenant) is this Job's own copy: changing it
// changes neither what is stored nor what the worker or its middleware
// read from the claim.
type Job struct {
	jobrow.Row

	progress func(ctx context.Context, data []byte) error
	result   []byte
	// dispatched: a Mux passed the job to the handler registered for its
	// kind, so a handler ran and NoHandler is false.
	dispatched bool
}

// JobSpec describes the Job that NewJob builds: the Row the worker read
// from the claim, and how Progress reaches Redis.
type JobSpec struct {
	jobrow.Row // NewJob copies it, Metadata into a map of the Job's own
	// Progress stores a progress report, fenced by the claim. nil means
	// none: Job.Progress then returns an error.
	Progress func(ctx context.Context, data []byte) error
}

// NewJob builds the Job that spec describes. The worker package builds
// every Job it runs with it; a handler's unit test can too, naming only the
// fields the handler reads.
func NewJob(spec JobSpec) *Job {
	j := &Job{Row: spec.Row, progress: spec.Progress}
	j.Metadata = maps.Clone(spec.Metadata) // nil stays nil: no allocation for a job without metadata
	return j
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
