package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/jobrow"
)

// outcomeOf decides every settlement: what the handler returned, read
// against why its context ended.
func TestOutcomeOf(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name        string
		herr, cause error
		want        outcome
		op          string
	}{
		{"success", nil, nil, outcomeDone, "ack"},
		{"error", boom, nil, outcomeRetry, "fail"},
		{"wrapped permanent", fmt.Errorf("x: %w", handlers.Permanent(boom)), nil, outcomeDead, "fail"},
		{"snooze", handlers.Snooze(time.Minute), nil, outcomeSnooze, "snooze"},
		{"no handler for the job's kind", handlers.Permanent(&handlers.UnknownKindError{Kind: "k"}), nil, outcomeUnhandled, "give back"},
		{"a handler's own unknown kind", handlers.Permanent(&handlers.UnknownKindError{Kind: "sub"}), nil, outcomeDead, "fail"},
		{"shutdown interrupts an unknown kind", &handlers.UnknownKindError{Kind: "k"}, handlers.ErrShutdown, outcomeInterrupted, "release"},
		{"lease lost beats success", nil, handlers.ErrLeaseLost, outcomeLeaseLost, "discard"},
		{"lease lost beats an error", boom, handlers.ErrLeaseLost, outcomeLeaseLost, "discard"},
		{"shutdown interrupts an error", context.Canceled, handlers.ErrShutdown, outcomeInterrupted, "release"},
		{"shutdown interrupts a permanent error", handlers.Permanent(boom), handlers.ErrShutdown, outcomeInterrupted, "release"},
		{"expired lease interrupts", boom, handlers.ErrLeaseExpired, outcomeInterrupted, "release"},
		{"success during shutdown is acked", nil, handlers.ErrShutdown, outcomeDone, "ack"},
		{"a cancelled job fails (the script settles it cancelled)", context.Canceled, handlers.ErrJobCancelled, outcomeRetry, "fail"},
		{"a cancelled job may still succeed", nil, handlers.ErrJobCancelled, outcomeDone, "ack"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := outcomeOf(tc.herr, tc.cause, handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{Kind: "k"}}))
			if got != tc.want || got.String() != tc.op {
				t.Fatalf("outcomeOf(%v, %v) = %v (%d), want %s (%d)", tc.herr, tc.cause, got, got, tc.op, tc.want)
			}
		})
	}
	// A handler that a Mux ran, returning a nested Mux's UnknownKindError
	// for the job's own kind, failed: its work may be done.
	inner, outer := handlers.NewMux(), handlers.NewMux()
	var got outcome
	outer.HandleFunc("k", func(ctx context.Context, j *handlers.Job) error {
		got = outcomeOf(inner.ProcessJob(ctx, j), nil, j)
		return nil
	})
	if err := outer.ProcessJob(t.Context(), handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{Kind: "k"}})); err != nil {
		t.Fatalf("ProcessJob = %v", err)
	}
	if got != outcomeDead {
		t.Fatalf("outcomeOf a nested Mux's unknown kind inside a handler = %v, want fail (dead)", got)
	}
	if d := snoozeDelay(fmt.Errorf("later: %w", handlers.Snooze(time.Minute))); d != time.Minute {
		t.Fatalf("snoozeDelay = %v, want 1m", d)
	}
}
