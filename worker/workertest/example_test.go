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

// WelcomeArgs is the payload of a "welcome" job.
type WelcomeArgs struct {
	To string `json:"to"`
}

// register is the code under test: it enqueues a welcome email.
func register(ctx context.Context, c *broker.Client, email string) error {
	_, err := c.Enqueue(ctx, broker.Job{Queue: "emails", Kind: "welcome", Payload: []byte(`{"to":"` + email + `"}`)})
	return err
}

// An Env is one test's queue, in memory. The code under test enqueues
// through env.Broker.Client(); RequireEnqueued checks what it enqueued, and Work
// runs a real pool over it until nothing is left to do. The body below is
// what a test function holds (t is its *testing.T).
func ExampleEnv() {
	testRegister := func(t *testing.T) {
		ctx := context.Background()
		env := workertest.New(t)

		if err := register(ctx, env.Broker.Client(), "ada@example.com"); err != nil {
			t.Fatal(err)
		}
		env.RequireEnqueued(t, "emails", "welcome", WelcomeArgs{To: "ada@example.com"})

		var sent []string
		mux := handlers.NewMux()
		mux.Handle("welcome", handlers.JSON(func(ctx context.Context, j *handlers.Job, a WelcomeArgs) error {
			sent = append(sent, a.To)
			return nil
		}))
		stats := env.Work(t, mux, "emails")
		if stats.Succeeded != 1 || len(sent) != 1 {
			t.Fatalf("succeeded %d, sent %v; want one welcome email", stats.Succeeded, sent)
		}
	}
	_ = testRegister
}

// Work leaves jobs scheduled for later where they are, such as a failed
// job waiting out its retry backoff; Advance moves the Env's Redis clock
// so that they fall due.
func ExampleEnv_Advance() {
	testRetry := func(t *testing.T) {
		ctx := context.Background()
		env := workertest.New(t)
		if err := register(ctx, env.Broker.Client(), "ada@example.com"); err != nil {
			t.Fatal(err)
		}
		failed := false
		mux := handlers.NewMux()
		mux.HandleFunc("welcome", func(ctx context.Context, j *handlers.Job) error {
			if !failed {
				failed = true
				return errors.New("smtp: busy") // retried after a backoff
			}
			return nil
		})
		if s := env.Work(t, mux, "emails"); s.Succeeded != 0 || s.Retried != 1 {
			t.Fatalf("stats %+v; want the first attempt retried, nothing succeeded yet", s)
		}
		env.Advance(time.Minute) // past the backoff
		if s := env.Work(t, mux, "emails"); s.Succeeded != 1 {
			t.Fatalf("succeeded %d after the backoff; want the retry to succeed", s.Succeeded)
		}
	}
	_ = testRetry
}

// InviteArgs is a typed job: its type names its kind.
type InviteArgs struct {
	To string `json:"to"`
}

// Kind names the job kind.
func (InviteArgs) Kind() string { return "invite" }

// invite is the code under test: it enqueues a typed job.
func invite(ctx context.Context, c *broker.Client, email string) error {
	_, err := c.EnqueueArgs(ctx, InviteArgs{To: email}, nil)
	return err
}

// Typed jobs are checked by value: RequireEnqueuedArgs finds the job where
// the enqueue put it, with no queue or kind to repeat, and a handler
// registered with handlers.Register runs it.
func ExampleEnv_RequireEnqueuedArgs() {
	testInvite := func(t *testing.T) {
		ctx := context.Background()
		env := workertest.New(t)

		if err := invite(ctx, env.Broker.Client(), "ada@example.com"); err != nil {
			t.Fatal(err)
		}
		env.RequireEnqueuedArgs(t, InviteArgs{To: "ada@example.com"}, nil)

		var sent []string
		mux := handlers.NewMux()
		handlers.Register(mux, func(ctx context.Context, j *handlers.Job, a InviteArgs) error {
			sent = append(sent, a.To)
			return nil
		})
		if stats := env.Work(t, mux); stats.Succeeded != 1 || len(sent) != 1 {
			t.Fatalf("succeeded %d, sent %v; want one invitation", stats.Succeeded, sent)
		}
	}
	_ = testInvite
}
