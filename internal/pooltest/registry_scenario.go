package pooltest

import (
	"context"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// Two pools on queues of different slots (on a Cluster) are both in the
// worker registry with the jobs they run; the holder of each job is the
// pool that runs it; each leaves the registry at its Shutdown.
func testRegistry(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	in := s.b.Inspector()
	release := make(chan struct{})
	h := handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Job) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	defer close(release)
	fast := func(name string, queue string) func(*worker.Config) {
		return func(c *worker.Config) {
			c.Name, c.Queues, c.RegistryInterval = name, []worker.Queue{{Name: queue}}, 50*time.Millisecond
		}
	}
	a := s.pool(t, h, fast("a", s.q))
	b := s.pool(t, h, fast("b", "other"))
	ja := s.enqueue(t, broker.Job{})
	jb, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: "other", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	holder := func(queue, id string) string {
		t.Helper()
		j, err := in.Job(s.ctx, queue, id)
		if err != nil || j.State != broker.StateRunning {
			return ""
		}
		w, _, ok, err := in.JobHolder(s.ctx, queue, id, j.Generation)
		if err != nil {
			t.Fatalf("JobHolder: %v", err)
		}
		if !ok {
			return ""
		}
		return w.Name
	}
	for deadline := time.Now().Add(10 * time.Second); holder(s.q, ja) != "a" || holder("other", jb) != "b"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			ws, _ := in.Workers(s.ctx)
			t.Fatalf("holders %q and %q, want a and b; registry %+v", holder(s.q, ja), holder("other", jb), ws)
		}
	}
	names := func() map[string]int {
		ws, err := in.Workers(s.ctx)
		if err != nil {
			t.Fatalf("Workers: %v", err)
		}
		m := map[string]int{}
		for _, w := range ws.Workers {
			m[w.Name] = w.Running
		}
		return m
	}
	if m := names(); len(m) != 2 || m["a"] != 1 || m["b"] != 1 {
		t.Fatalf("registry %v, want a and b running one job each", m)
	}
	a.shutdown(t)
	if m := names(); len(m) != 1 || m["b"] != 1 {
		t.Fatalf("after a's Shutdown the registry holds %v, want b only", m)
	}
	b.shutdown(t)
	if m := names(); len(m) != 0 {
		t.Fatalf("after both Shutdowns the registry holds %v", m)
	}
}
