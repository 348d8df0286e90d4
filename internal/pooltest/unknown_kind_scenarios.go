package pooltest

import (
	"context"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
)

// waitGivenBack polls the job until no pool holds it and it is not ready:
// given back to wait, or finished.
func (s *bundle) waitGivenBack(t *testing.T, id string, within time.Duration) broker.JobInfo {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		j, err := s.b.Job(s.ctx, s.q, id)
		if err != nil {
			t.Fatalf("Job: %v", err)
		}
		if j.State != broker.StatePending && j.State != broker.StateRunning {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after %v\nlogs:\n%s", id, j.State, within, s.logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A rolling deploy: a pool that has no handler for a job's kind gives it
// back uncharged, to wait, with the defaults; a pool that has the kind then
// runs it, as its first attempt, even with a single attempt allowed.
func testUnknownKindWaitsForItsPool(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	old := handlers.NewMux()
	old.HandleFunc("old", func(context.Context, *handlers.Job) error { return nil })
	pa := s.pool(t, old)
	id := s.enqueue(t, broker.Job{Kind: "new", MaxAttempts: 1})

	j := s.waitGivenBack(t, id, 10*time.Second)
	want(t, "state after the old pool", j.State, broker.StateScheduled)
	want(t, "attempt after the old pool", j.Attempt, 0)
	want(t, "errors recorded", len(j.Errors), 0)
	if wait := j.RunAt.Sub(j.ClaimedAt); wait < time.Second {
		t.Fatalf("given back to run %v after its claim; a pool without the kind would claim it again at once", wait)
	}
	st := pa.Stats()
	want(t, "dead on the old pool", st.Dead, int64(0))
	want(t, "retried on the old pool", st.Retried, int64(0))
	pa.shutdown(t)

	ran := make(chan int, 1)
	mux := handlers.NewMux()
	mux.HandleFunc("new", func(_ context.Context, j *handlers.Job) error {
		ran <- j.Attempt
		return nil
	})
	s.pool(t, mux)
	want(t, "attempt on the new pool", recv(t, "the new pool to run it", ran, 20*time.Second), 1)
	want(t, "state", s.waitFinal(t, id, 5*time.Second).State, broker.StateDone)
	s.consistent(t)
}
