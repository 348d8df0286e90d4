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
