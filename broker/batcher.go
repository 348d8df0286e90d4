package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

const (
	// BatcherMaxJobsDefault is how many jobs one round trip of a Batcher
	// carries at most when BatcherOptions.MaxJobs is 0.
	BatcherMaxJobsDefault = 256
	// BatcherMaxBytesDefault bounds the payload bytes of one round trip of
	// a Batcher when BatcherOptions.MaxBytes is 0.
	BatcherMaxBytesDefault = 1 << 20
)

var (
	// ErrBatcherClosed is wrapped by the error of a Batcher.Enqueue after
	// Close. Nothing was written.
	ErrBatcherClosed = errors.New("batcher closed")
	// ErrOutcomeUnknown is wrapped by the error of a request that Redis
	// may have run but whose answer is unknown: an *OutcomeUnknownError
	// (no reply came back however often the broker sent it), or, with the
	// context's error, a Batcher.Enqueue whose context ended after its job
	// was sent. An enqueue's job may be stored: Enqueue returns its id;
	// enqueue it again with that ID (a *DuplicateError then means it was
	// kept), or look it up with Job. Never enqueue it again under a new id.
	ErrOutcomeUnknown = errors.New("sent, but its answer is unknown")
)

// BatcherOptions configures a Batcher. The zero value is ready to use.
type BatcherOptions struct {
	// MaxJobs is the most jobs one round trip carries: 0 means
	// BatcherMaxJobsDefault (256), 1 sends every job on its own. It must
	// not be negative.
	MaxJobs int
	// MaxBytes bounds the payload bytes of one round trip (a job larger
	// than that goes on its own): 0 means BatcherMaxBytesDefault (1 MiB),
	// -1 no bound beyond MaxJobs.
	MaxBytes int
}

func (o BatcherOptions) withDefaults() BatcherOptions {
	o.MaxJobs = cmp.Or(o.MaxJobs, BatcherMaxJobsDefault)
	o.MaxBytes = cmp.Or(o.MaxBytes, BatcherMaxBytesDefault)
	return o
}

func (o BatcherOptions) validate() error {
	if o.MaxJobs < 0 {
		return &ValidationError{Field: "MaxJobs", Value: fmt.Sprint(o.MaxJobs), Reason: "must be at least 1 (0 means the default, 256)"}
	}
	if o.MaxBytes < -1 {
		return &ValidationError{Field: "MaxBytes", Value: fmt.Sprint(o.MaxBytes), Reason: "must be positive, 0 for the default, or -1 for no bound"}
	}
	return nil
}

// A Batcher enqueues jobs for many goroutines at once: each caller enqueues
// one job and waits for its answer, as with Client.Enqueue, while the jobs
// of concurrent callers share round trips. It sends whatever is waiting
// when it is free: a caller that finds it idle is sent at once (no timer,
// no added latency), and the jobs that arrive while a round trip is in
// flight go together in the next one, up to MaxJobs and MaxBytes. One
// goroutine enqueueing one job at a time gains nothing from it; use
// Client.Enqueue, or EnqueueMany for jobs that are known together.
//
// Each job keeps every guarantee of Client.Enqueue: it is its own atomic
// script, judged in the order the jobs reached the Batcher, and answered
// with its own id and error (*ValidationError, *DuplicateError,
// *UniqueHeldError, or the round trip's). A round trip sent again after
// its reply was lost (go-redis retries one whose connection failed)
// answers each job it created as created, as EnqueueMany does.
//
// A Batcher runs one goroutine while it has jobs to send, none while idle.
// It is safe for concurrent use. Close it to wait for the jobs in flight.
type Batcher struct {
	b    *Client
	opts BatcherOptions

	mu      sync.Mutex
	idle    *sync.Cond    // signalled when sending stops
	waiting []*batchedJob // not yet sent, in order of arrival; dropped ones until passed over
	sending bool          // the sender goroutine runs
	closed  bool
	stats   BatcherStats
}

// BatcherStats counts a Batcher's work since NewBatcher.
type BatcherStats struct {
	Batches int64 // round trips sent
	Jobs    int64 // jobs sent in them: Jobs/Batches is the mean batch
	Waiting int   // jobs waiting for the next round trip
}

// Stats reports the Batcher's counts.
func (bt *Batcher) Stats() BatcherStats {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	s := bt.stats
	for _, bj := range bt.waiting {
		if bj.state == batchWaiting {
			s.Waiting++
		}
	}
	return s
}

// batchedJob is one caller's job in a Batcher.
type batchedJob struct {
	ctx   context.Context // the caller's: its values go with the round trip
	call  *enqueueCall
	size  int
	state batchState // guarded by Batcher.mu
	res   Enqueued
	done  chan struct{} // closed once res is set
}

type batchState int

const (
	batchWaiting batchState = iota
	batchSent               // in a round trip: its caller can no longer take it back
	batchDropped            // its caller gave up before it was sent: never sent
)

// NewBatcher returns a Batcher that enqueues through c, a broker's
// Client (Broker.Client).
func NewBatcher(c *Client, opts BatcherOptions) (*Batcher, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	bt := &Batcher{b: c, opts: opts}
	bt.idle = sync.NewCond(&bt.mu)
	return bt, nil
}

// Enqueue stores a job as Client.Enqueue does, with the same answers, in a
// round trip it may share with the jobs of other callers.
//
// If ctx ends before the job was sent, nothing is written and the error is
// ctx's. If it ends while the job's round trip is in flight, that round
// trip goes on (other callers' jobs share it) and Enqueue returns at once
// with the job's id and an error wrapping ErrOutcomeUnknown and ctx's
// error: the job may be stored. The round trip carries the values of the
// context of its first job (for tracing and hooks), never its
// cancellation.
//
// After Close, Enqueue writes nothing and returns an error wrapping
// ErrBatcherClosed.
func (bt *Batcher) Enqueue(ctx context.Context, j Job) (string, error) {
	var span trace.Span
	if bt.b.tracer != nil { // off, tracing costs this check alone
		span = bt.b.traceEnqueue(ctx, &j)
	}
	id, err := bt.enqueue(ctx, j)
	if span != nil {
		endEnqueue(span, Enqueued{ID: id, Err: err})
	}
	return id, err
}

// enqueue is Enqueue's work.
func (bt *Batcher) enqueue(ctx context.Context, j Job) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	bt.mu.Lock()
	closed := bt.closed
	bt.mu.Unlock()
	if closed {
		return "", fmt.Errorf("fenceq: enqueue in queue %q: %w", j.Queue, ErrBatcherClosed)
	}
	c, err := bt.b.prepare(ctx, &j)
	if err != nil {
		return "", err
	}
	bj := &batchedJob{ctx: ctx, call: c, size: len(j.Payload), done: make(chan struct{})}
	bt.mu.Lock()
	if bt.closed {
		bt.mu.Unlock()
		return "", fmt.Errorf("fenceq: enqueue in queue %q: %w", j.Queue, ErrBatcherClosed)
	}
	bt.waiting = append(bt.waiting, bj)
	if !bt.sending {
		bt.sending = true
		go bt.send()
	}
	bt.mu.Unlock()

	select {
	case <-bj.done:
		return bj.res.ID, bj.res.Err
	case <-ctx.Done():
	}
	bt.mu.Lock()
	state := bj.state
	if state == batchWaiting {
		bj.state = batchDropped
	}
	bt.mu.Unlock()
	if state == batchWaiting {
		return "", ctx.Err()
	}
	select {
	case <-bj.done: // answered meanwhile: the answer is known after all
		return bj.res.ID, bj.res.Err
	default:
		return c.id, fmt.Errorf("fenceq: enqueue %q in queue %q: %w: %w", c.id, c.k.name, ErrOutcomeUnknown, ctx.Err())
	}
}

// Close stops taking jobs and waits until every job taken has been sent
// and answered, those whose callers stopped waiting included: when it
// returns, no round trip of the Batcher is in flight. Enqueue after Close
// fails with ErrBatcherClosed. Close always returns nil; a second call waits
// as the first.
func (bt *Batcher) Close() error {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	bt.closed = true
	for bt.sending {
		bt.idle.Wait()
	}
	return nil
}

// send sends the waiting jobs, a batch per round trip, until none wait.
func (bt *Batcher) send() {
	for {
		bt.mu.Lock()
		batch := bt.take()
		if len(batch) == 0 {
			bt.sending = false
			bt.idle.Broadcast()
			bt.mu.Unlock()
			return
		}
		bt.mu.Unlock()

		calls := make([]*enqueueCall, len(batch))
		for i, bj := range batch {
			calls[i] = bj.call
		}
		// No caller's cancellation may stop a round trip that carries the
		// jobs of others.
		ctx := context.WithoutCancel(batch[0].ctx)
		bt.b.send(ctx, calls)
		for i, bj := range batch {
			bj.res = bt.b.answer(calls[i])
			close(bj.done)
		}
	}
}

// take removes the next batch from the waiting jobs and marks it sent,
// passing over jobs whose callers gave up: up to MaxJobs jobs and MaxBytes
// of payload, and at least one job. bt.mu is held.
func (bt *Batcher) take() []*batchedJob {
	var batch []*batchedJob
	bytes, n := 0, 0
	for ; n < len(bt.waiting) && len(batch) < bt.opts.MaxJobs; n++ {
		bj := bt.waiting[n]
		if bj.state == batchDropped {
			continue
		}
		if len(batch) > 0 && bt.opts.MaxBytes >= 0 && bytes+bj.size > bt.opts.MaxBytes {
			break
		}
		bj.state = batchSent
		batch = append(batch, bj)
		bytes += bj.size
	}
	if len(batch) > 0 {
		bt.stats.Batches++
		bt.stats.Jobs += int64(len(batch))
	}
	left := copy(bt.waiting, bt.waiting[n:])
	clear(bt.waiting[left:]) // no references kept to jobs taken
	bt.waiting = bt.waiting[:left]
	return batch
}
