package workertest_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker/workertest"
)

// recordTB stands for the test Work is given: it records a Fatalf instead
// of failing the real test.
type recordTB struct {
	testing.TB
	mu    sync.Mutex
	fatal string
}

func (r *recordTB) Helper() {}
func (r *recordTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fatal += fmt.Sprintf(format, args...) + "\n"
}
func (r *recordTB) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

// work runs env.Work on a recordTB and answers what it failed with.
func work(t *testing.T, env *workertest.Env, h handlers.Handler) string {
	r := &recordTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		env.Work(r, h)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

// Work runs "until nothing is left to do now": jobs that cannot run until
// the Env's clock moves (a rate limit's window, like a delayed job) or
// until the test resumes the queue stay, as scheduled jobs do. (Work once
// counted them as ready and failed the test after 30s: the Env's Redis
// clock never moves by itself.)
func TestWorkWithHeldBackJobs(t *testing.T) {
	ok := handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return nil })
	for _, tc := range []struct {
		name  string
		setup func(*workertest.Env) error
	}{
		{"rate limit", func(e *workertest.Env) error {
			return e.Broker.Inspector().SetRate(context.Background(), "default", 1, time.Minute)
		}},
		{"paused", func(e *workertest.Env) error { return e.Broker.Inspector().Pause(context.Background(), "default") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := workertest.New(t)
			ctx := context.Background()
			if err := tc.setup(env); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := env.Broker.Client().Enqueue(ctx, broker.Job{Queue: "default", Kind: "k"}); err != nil {
					t.Fatal(err)
				}
			}
			if failed := work(t, env, ok); failed != "" {
				t.Fatalf("Work on a queue whose jobs wait for the clock or a resume failed: %s", failed)
			}
		})
	}
}
