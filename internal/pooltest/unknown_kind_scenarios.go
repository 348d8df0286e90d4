package pooltest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// waitGivenBack polls the job until no pool holds it and it is not ready:
// given back to wait, or finished.
func (s *bundle) waitGivenBack(t *testing.T, id string, within time.Duration) broker.JobInfo {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		j, err := s.b.Inspector().Job(s.ctx, s.q, id)
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

// A job that waits longer than UnknownKind.For for a pool that has its kind
// is dead, with an error that names the kind and says what to do; until
// then each pool that lacks the kind claims it again only when its wait is
// over (no claim loop), and warns once for the kind, not once per job.
func testUnknownKindBound(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	mux := handlers.NewMux()
	mux.HandleFunc("old", func(context.Context, *handlers.Job) error { return nil })
	p := s.pool(t, mux, func(c *worker.Config) {
		c.UnknownKind = worker.UnknownKindPolicy{Delay: 100 * time.Millisecond, MaxDelay: 200 * time.Millisecond, For: 700 * time.Millisecond}
	})
	const jobs = 20
	ids := make([]string, jobs)
	for i := range ids {
		ids[i] = s.enqueue(t, broker.Job{Kind: "new", MaxAttempts: 3})
	}
	for _, id := range ids {
		j := s.waitFinal(t, id, 20*time.Second)
		want(t, "state", j.State, broker.StateDead)
		want(t, "attempt of the dead job", j.Attempt, 1)
		want(t, "errors recorded", len(j.Errors), 1)
		for _, part := range []string{`no pool registered kind "new"`, "deploy a runner that handles", "workerd retry q " + id} {
			if !strings.Contains(j.LastError, part) {
				t.Fatalf("last error %q lacks %q", j.LastError, part)
			}
		}
	}
	st := p.Stats()
	want(t, "dead", st.Dead, int64(jobs))
	want(t, "retried", st.Retried, int64(0))
	// Each job waited 100ms, then three times as long as it had waited
	// (≥ 300ms, capped at 200ms) until 700ms had passed: about four
	// give-backs each, whatever the machine's speed. A pool that took it
	// back at once would claim it hundreds of times.
	t.Logf("%d jobs given back %d times in all, claimed %d times", jobs, st.GivenBack, st.Claimed)
	if per := float64(st.GivenBack) / jobs; per < 2 || per > 8 {
		t.Fatalf("given back %d times for %d jobs (%.1f each), want 2 to 8 each", st.GivenBack, jobs, per)
	}
	want(t, "claims", st.Claimed, st.GivenBack+jobs)
	if n := s.logs.count("fenceq has no handler for a job's kind"); n != 1 {
		t.Fatalf("warned %d times for one kind, want once a minute\nlogs:\n%s", n, s.logs)
	}
	if n := s.logs.count("job failed"); n != 0 {
		t.Fatalf("logged %d failures for jobs that were given back", n)
	}
	s.consistent(t)
}
