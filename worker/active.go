package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
)

// active is one job the pool holds.
type active struct {
	lease  broker.Lease
	job    *handlers.Job
	ctx    context.Context
	cancel context.CancelCauseFunc
	span   trace.Span // this attempt's, in ctx; nil when the pool does not trace
	// settling is set when the handler has returned: a renew that finds
	// the lease gone after that has most likely met our own settlement,
	// which reports for itself if it was stale.
	settling atomic.Bool
	// passed is set when the acker gave this job's slot to a job it claimed
	// with the ack: the slot is not freed when this job ends.
	passed atomic.Bool
	// next is the job claimed into this job's slot by a settlement its own
	// goroutine sent (acker.ack's direct path): that goroutine runs it
	// next (execute), with no goroutine started and no hop to the acker.
	// Written and read by that goroutine only.
	next *active

	mu            sync.Mutex
	localDeadline time.Time   // when the lease certainly stops being ours
	expiry        *time.Timer // fires at localDeadline: the watchdog
}

func (a *active) deadline() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.localDeadline
}

func (a *active) extend(d time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.localDeadline = d
	a.expiry.Reset(time.Until(d))
}

// heldJobs is the set of jobs the pool holds, and the gate Shutdown closes
// before it waits for their handlers: once closed, no job is added and no
// fused call is sent.
type heldJobs struct {
	mu     sync.Mutex
	jobs   map[*active]struct{}
	closed bool
	// handlers counts the jobs added and not yet done (drainHandlers waits
	// for it).
	handlers sync.WaitGroup
	// fused counts the settlements sent with a claim (acker.send,
	// fusedSettle), registered while the gate is open: Shutdown waits for
	// them before the claims they leave to be asked for again
	// (waitClaims), also those a handler's own goroutine sends after
	// Shutdown stopped waiting for it (abandoned).
	fused sync.WaitGroup
}

func newHeldJobs() *heldJobs { return &heldJobs{jobs: map[*active]struct{}{}} }

// add holds a, and reports whether it may: not once the gate is closed.
func (h *heldJobs) add(a *active) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.jobs[a] = struct{}{}
	h.handlers.Add(1)
	return true
}

// done lets go of a job add held.
func (h *heldJobs) done(a *active) {
	h.mu.Lock()
	delete(h.jobs, a)
	h.mu.Unlock()
	h.handlers.Done()
}

// close shuts the gate. From then on no job is added, so waiting for
// handlers cannot race with a new one.
func (h *heldJobs) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
}

// fusedBegin registers a fused call about to be sent, and reports whether
// it may be: not once the gate is closed, since Shutdown would give back
// the jobs it claims anyway. fused.Done ends it.
func (h *heldJobs) fusedBegin() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.fused.Add(1)
	return true
}

func (h *heldJobs) snapshot() []*active {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*active, 0, len(h.jobs))
	for a := range h.jobs {
		out = append(out, a)
	}
	return out
}

// slots are the pool's handler slots: one token per running handler, and
// the nudge a freed one gives the dispatcher.
type slots struct {
	tokens chan struct{}
	freed  chan struct{}
}

func newSlots(n int) *slots {
	return &slots{tokens: make(chan struct{}, n), freed: make(chan struct{}, 1)}
}

// take takes a slot; the caller knows one is free.
func (s *slots) take() { s.tokens <- struct{}{} }

// free gives a slot back and nudges the dispatcher.
func (s *slots) free() {
	<-s.tokens
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

func (s *slots) running() int { return len(s.tokens) }
func (s *slots) idle() int    { return cap(s.tokens) - len(s.tokens) }
