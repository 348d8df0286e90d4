package pooltest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
)

// A handler reads the job's group on every attempt, and "" for a job
// without one.
func testGroup(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	type seenJob struct{ id, group string }
	seen := make(chan seenJob, 3)
	var snoozed atomic.Bool
	s.pool(t, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		seen <- seenJob{j.ID, j.Group}
		if j.Group != "" && !snoozed.Swap(true) {
			return handlers.Snooze(0) // runs again: the group comes back with it
		}
		return nil
	}))
	grouped := s.enqueue(t, broker.Job{Group: "acme"})
	plain := s.enqueue(t, broker.Job{})
	wantGroup := map[string]string{grouped: "acme", plain: ""}
	for i := range 3 {
		got := recv(t, "an attempt", seen, 10*time.Second)
		if g, ok := wantGroup[got.id]; !ok || got.group != g {
			t.Fatalf("attempt %d: job %s with group %q; want %q", i+1, got.id, got.group, g)
		}
	}
	for _, id := range []string{grouped, plain} {
		want(t, "final state", s.waitFinal(t, id, 10*time.Second).State, broker.StateDone)
	}
}
