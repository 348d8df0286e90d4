package pooltest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
)

// A job whose kind the pool does have a handler for ran that handler; an
// UnknownKindError naming the job's kind that the handler returns after its
// work (a nested Mux it passes the job on to lacks the kind) is that
// handler's failure, not a pool without the kind. The pool gives it back
// instead, uncharged, with no error recorded, to run the handler — and its
// side effects — again every few minutes for a day, and the job's final
// error then says that no pool registered a kind that every pool has.
func testUnknownKindInsideAHandler(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	var ran atomic.Int32
	inner := handlers.NewMux() // a second stage that was never given "report"
	inner.HandleFunc("render", func(context.Context, *handlers.Job) error { return nil })
	mux := handlers.NewMux()
	mux.HandleFunc("report", func(ctx context.Context, j *handlers.Job) error {
		ran.Add(1) // the side effect: an email sent, a row written
		return inner.ProcessJob(ctx, j)
	})
	p := s.pool(t, mux)
	id := s.enqueue(t, broker.Job{Kind: "report", MaxAttempts: 1})

	j := s.waitGivenBack(t, id, 10*time.Second)
	want(t, "times the handler ran", ran.Load(), int32(1))
	want(t, "given back", p.Stats().GivenBack, int64(0))
	want(t, "state of a job whose handler ran and failed, with one attempt", j.State, broker.StateDead)
	want(t, "attempt", j.Attempt, 1)
	want(t, "errors recorded", len(j.Errors), 1)
	s.consistent(t)
}
