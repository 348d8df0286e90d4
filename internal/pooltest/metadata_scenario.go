package pooltest

import (
	"context"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
)

// A handler reads the job's metadata on every attempt, as enqueued, and
// what it changes in its copy does not reach the next attempt.
func testMetadata(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	meta := map[string]string{"request_id": "r-42", "tenant": "acme"}
	seen := make(chan map[string]string, 2)
	var runs atomic.Int32
	s.pool(t, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		seen <- maps.Clone(j.Metadata)
		if runs.Add(1) == 1 {
			j.Metadata["tenant"] = "changed by the first attempt"
			return handlers.Snooze(0)
		}
		return nil
	}))
	id := s.enqueue(t, broker.Job{Metadata: meta})
	for _, attempt := range []string{"first", "second"} {
		if got := recv(t, attempt+" attempt", seen, 10*time.Second); !maps.Equal(got, meta) {
			t.Fatalf("%s attempt's Job.Metadata = %v, want %v", attempt, got, meta)
		}
	}
	want(t, "final state", s.waitFinal(t, id, 10*time.Second).State, broker.StateDone)
}
