package workertest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker/workertest"
)

type welcome struct {
	To string `json:"to"`
}

// signup stands for the code under test: it enqueues a welcome email.
func signup(ctx context.Context, c *broker.Client, to string) error {
	_, err := c.Enqueue(ctx, broker.Job{Queue: "emails", Kind: "welcome", Payload: []byte(`{"to":"` + to + `"}`), MaxAttempts: 3})
	return err
}

func TestEnvEnqueueWorkAdvance(t *testing.T) {
	env := workertest.New(t)
	ctx := context.Background()
	if err := signup(ctx, env.Broker.Client(), "ada@example.com"); err != nil {
		t.Fatal(err)
	}
	j := env.RequireEnqueued(t, "emails", "welcome", welcome{To: "ada@example.com"})

	sent, failures := 0, 0
	mux := handlers.NewMux()
	mux.Handle("welcome", handlers.JSON(func(_ context.Context, _ *handlers.Job, w welcome) error {
		if failures == 0 {
			failures++
			return errors.New("smtp busy") // retried after a backoff: needs time
		}
		sent++
		return nil
	}))
	s := env.Work(t, mux, "emails")
	if s.Retried != 1 || sent != 0 {
		t.Fatalf("first Work: %+v, sent %d; want one retry waiting", s, sent)
	}
	env.Advance(time.Hour) // the backoff passes
	env.Work(t, mux, "emails")
	if sent != 1 {
		t.Fatalf("sent %d after the retry fell due", sent)
	}
	done, err := env.Broker.Inspector().Job(ctx, "emails", j.ID)
	if err != nil || done.State != broker.StateDone || done.Attempt != 2 {
		t.Fatalf("job %+v %v", done, err)
	}
	if len(env.Enqueued(t, "emails", "welcome")) != 0 {
		t.Fatal("nothing should wait any more")
	}
}

// Work does not stop while a job that fell due is being claimed: the claim
// can land between any two reads Work makes, and its reply can still be on
// its way to the pool. Each round gives that race another chance (one in
// ten or so, when Work read Redis in several steps).
func TestEnvWorkRunsDueJob(t *testing.T) {
	env := workertest.New(t)
	ctx := context.Background()
	mux := handlers.NewMux()
	mux.HandleFunc("k", func(context.Context, *handlers.Job) error { return nil })
	for round := range 50 {
		if _, err := env.Broker.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", Delay: time.Minute}); err != nil {
			t.Fatal(err)
		}
		env.Advance(time.Minute)
		if s := env.Work(t, mux, "q"); s.Succeeded != 1 {
			t.Fatalf("round %d: %+v; want the due job done", round, s)
		}
	}
}
