package broker

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Job is what Enqueue takes.
type Job struct {
	Queue   string // required; no '{' or '}'
	Kind    string // required; selects the handler
	Payload []byte // opaque to the broker; at most Options.MaxPayloadBytes

	// ID is optional. A caller-chosen id makes enqueue idempotent: a second
	// enqueue with the same id returns a *DuplicateError and changes nothing.
	// Empty means a new time-ordered UUID.
	ID string
	// Delay runs the job this long after Redis receives it (Redis time).
	Delay time.Duration
	// RunAt runs the job at this wall-clock time instead; set at most one of
	// Delay and RunAt. A time in the past means now.
	RunAt time.Time
	// MaxAttempts is how many times the job may be claimed before it is dead.
	// 0 means MaxAttemptsDefault (25); it must not be negative.
	MaxAttempts int
	// Priority runs from PriorityMin to PriorityMax (-100..100); higher is
	// claimed first, FIFO within one priority. Default 0.
	Priority int
}

func (b *Broker) validate(j *Job) error {
	if err := validName("queue", j.Queue); err != nil {
		return err
	}
	if err := validName("kind", j.Kind); err != nil {
		return err
	}
	if j.ID != "" {
		if err := validID(j.Queue, j.ID); err != nil {
			return err
		}
	}
	if max := b.opts.MaxPayloadBytes; max >= 0 && len(j.Payload) > max {
		return &ValidationError{Field: "payload", Reason: fmt.Sprintf("is %d bytes; the limit is %d (Options.MaxPayloadBytes). Store large data elsewhere and enqueue a reference to it", len(j.Payload), max)}
	}
	if j.Delay < 0 {
		return &ValidationError{Field: "delay", Value: j.Delay.String(), Reason: "must not be negative"}
	}
	if j.Delay > 0 && !j.RunAt.IsZero() {
		return &ValidationError{Field: "delay", Value: j.Delay.String(), Reason: "set Delay or RunAt, not both"}
	}
	if j.MaxAttempts < 0 {
		return &ValidationError{Field: "max attempts", Value: fmt.Sprint(j.MaxAttempts), Reason: "must be at least 1 (0 means the default, 25)"}
	}
	if j.Priority < PriorityMin || j.Priority > PriorityMax {
		return &ValidationError{Field: "priority", Value: fmt.Sprint(j.Priority), Reason: fmt.Sprintf("must be between %d and %d", PriorityMin, PriorityMax)}
	}
	return nil
}

// Enqueue stores a job, pending at once or scheduled for later, and wakes a
// waiting worker. It returns the job's id. A duplicate id returns a
// *DuplicateError (errors.Is ErrJobExists); bad arguments return a
// *ValidationError (errors.Is ErrInvalid) and write nothing.
func (b *Broker) Enqueue(ctx context.Context, j Job) (string, error) {
	if err := b.validate(&j); err != nil {
		return "", err
	}
	if j.ID == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return "", fmt.Errorf("fenceq: enqueue: new job id: %w", err)
		}
		j.ID = u.String()
	}
	k := b.queueKeys(j.Queue)
	if err := b.register(ctx, k); err != nil {
		return "", err
	}
	delayMS, atMS := int64(-1), int64(-1)
	if j.RunAt.IsZero() {
		delayMS = j.Delay.Milliseconds()
	} else {
		atMS = j.RunAt.UnixMilli()
	}
	v, err := b.run(ctx, b.scripts.enqueue, k, j.ID, j.Kind, j.Payload,
		cmp.Or(j.MaxAttempts, MaxAttemptsDefault), j.Priority, delayMS, atMS).Result()
	r := newReply("enqueue "+j.Queue, v, err)
	status, state := r.str(), State(r.str())
	if r.err != nil {
		return "", r.err
	}
	if status == "exists" {
		return j.ID, &DuplicateError{Queue: j.Queue, ID: j.ID, State: state}
	}
	return j.ID, nil
}
