package worker_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// goroutineID is the running goroutine's number, as its stack trace
// names it.
func goroutineID(t *testing.T) int64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf) // "goroutine 42 [running]: ..."
	if len(f) < 2 {
		t.Errorf("stack %q: no goroutine number", buf)
		return 0
	}
	id, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		t.Errorf("stack %q: %v", buf, err)
	}
	return id
}

// A pool of one slot working through a backlog sends each settlement, with
// the claim of the next job, from the handler's own goroutine, which then
// runs the job it claimed: the whole backlog runs on one goroutine, with no
// goroutine started and no hop to the acker per job. Successes (FusedAck)
// and failures (FusedFail) alike.
func TestFusedBacklogRunsOnOneGoroutine(t *testing.T) {
	const n = 20
	var mu sync.Mutex
	seen := map[int64]int{}
	ran := 0
	b, p, _ := fusedRig(t, n, worker.Config{Concurrency: 1, Logger: slog.New(slog.DiscardHandler)}, func(context.Context, *handlers.Job) error {
		id := goroutineID(t)
		mu.Lock()
		defer mu.Unlock()
		seen[id]++
		if ran++; ran%2 == 0 {
			return errors.New("every second job fails (dead: one attempt)")
		}
		return nil
	})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFinished(t, b, n)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 {
		t.Errorf("the %d jobs ran on %d goroutines (%v), want one", n, len(seen), seen)
	}
}
