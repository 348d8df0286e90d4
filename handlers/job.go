package handlers

import (
	"context"
	"errors"
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

	progress func(ctx context.Context, data []byte) error
	result   []byte
}

// NewJob builds a Job whose Progress calls report; the worker package uses
// it, and tests of handlers can too (report may be nil).
func NewJob(id, queue, kind string, payload []byte, attempt, maxAttempts int, generation int64,
	report func(ctx context.Context, data []byte) error) *Job {
	return &Job{ID: id, Queue: queue, Kind: kind, Payload: payload, Attempt: attempt,
		MaxAttempts: maxAttempts, Generation: generation, progress: report}
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
