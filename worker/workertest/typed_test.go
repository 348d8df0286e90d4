package workertest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker/workertest"
)

// greetArgs has no default options: its jobs go to broker.QueueDefault.
type greetArgs struct {
	Name string `json:"name"`
}

func (greetArgs) Kind() string { return "greet" }

// reportArgs admits one report per day, in the "reports" queue.
type reportArgs struct {
	Day string `json:"day"`
}

func (reportArgs) Kind() string { return "report" }

func (a reportArgs) EnqueueOptions() broker.EnqueueOptions {
	return broker.EnqueueOptions{Queue: "reports", UniqueKey: "report-" + a.Day}
}

// A typed job enqueued with no queue is found where JobFor puts it, and a
// pool with no queues configured (worker.QueueDefault) runs it through the
// handler Register'd for its type, with the args decoded.
func TestTypedEnqueueAndWork(t *testing.T) {
	env := workertest.New(t)
	ctx := context.Background()
	id, err := env.Broker.Client().EnqueueArgs(ctx, greetArgs{Name: "Ada"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := env.RequireEnqueuedArgs(t, greetArgs{Name: "Ada"}, nil); j.ID != id {
		t.Fatalf("found job %q; want %q", j.ID, id)
	}

	var greeted []string
	mux := handlers.NewMux()
	handlers.Register(mux, func(_ context.Context, job *handlers.Job, a greetArgs) error {
		greeted = append(greeted, job.Queue+" "+a.Name)
		return nil
	})
	if s := env.Work(t, mux); s.Succeeded != 1 || len(greeted) != 1 || greeted[0] != broker.QueueDefault+" Ada" {
		t.Fatalf("stats %+v, greeted %q; want Ada greeted once from the default queue", s, greeted)
	}
}

// A type whose default options hold a unique key: the second enqueue of
// the same day answers the holder, and one job runs.
func TestTypedUniqueAnswersHolder(t *testing.T) {
	env := workertest.New(t)
	ctx := context.Background()
	first, err := env.Broker.Client().EnqueueArgs(ctx, reportArgs{Day: "2030-01-01"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := env.Broker.Client().EnqueueArgs(ctx, reportArgs{Day: "2030-01-01"}, nil)
	var held *broker.UniqueHeldError
	if !errors.As(err, &held) || second != first || held.HolderID != first {
		t.Fatalf("second enqueue: %q, %v; want the holder %q and a *UniqueHeldError", second, err, first)
	}
	env.RequireEnqueuedArgs(t, reportArgs{Day: "2030-01-01"}, nil)
	if n := len(env.Enqueued(t, "reports", "report")); n != 1 {
		t.Fatalf("%d report jobs waiting; want 1", n)
	}

	runs := 0
	mux := handlers.NewMux()
	handlers.Register(mux, func(context.Context, *handlers.Job, reportArgs) error { runs++; return nil })
	if env.Work(t, mux, "reports"); runs != 1 {
		t.Fatalf("report ran %d times; want once", runs)
	}
}

// RequireEnqueuedArgs fails when no job has those args in the queue JobFor
// resolves, and when JobFor refuses the args.
func TestRequireEnqueuedArgsFails(t *testing.T) {
	env := workertest.New(t)
	if _, err := env.Broker.Client().EnqueueArgs(context.Background(), greetArgs{Name: "Ada"}, &broker.EnqueueOptions{Queue: "greetings"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args broker.Args
		opts *broker.EnqueueOptions
		want string
	}{
		{"other args", greetArgs{Name: "Grace"}, &broker.EnqueueOptions{Queue: "greetings"}, `no "greet" job in queue "greetings"`},
		{"other queue", greetArgs{Name: "Ada"}, nil, `no "greet" job in queue "default"`},
		{"refused args", nil, nil, "invalid args"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recordTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				env.RequireEnqueuedArgs(r, c.args, c.opts)
			}()
			<-done
			if !strings.Contains(r.fatal, c.want) {
				t.Fatalf("failed with %q; want it to say %q", r.fatal, c.want)
			}
		})
	}
	env.RequireEnqueuedArgs(t, greetArgs{Name: "Ada"}, &broker.EnqueueOptions{Queue: "greetings"})
}
