package handlers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/jobrow"
)

// newJob builds a job of kind with payload and no progress reporter; the
// other fields are fixed so a test only states what it cares about.
func newJob(kind string, payload []byte) *handlers.Job {
	return handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "job-1", Queue: "default", Kind: kind, Payload: payload, Attempt: 1, MaxAttempts: 5, Generation: 7}})
}

// mustPanic runs fn and fails the test unless it panics with a message
// that contains want.
func mustPanic(t *testing.T, want string, fn func()) {
	t.Helper()
	defer func() {
		t.Helper()
		v := recover()
		if v == nil {
			t.Fatalf("did not panic; want a panic mentioning %q", want)
		}
		msg, ok := v.(string)
		if !ok {
			t.Fatalf("panic value %#v is a %T, want a string", v, v)
		}
		if !strings.Contains(msg, want) {
			t.Fatalf("panic %q does not mention %q", msg, want)
		}
	}()
	fn()
}

// record returns a handler that appends name to *calls, so a test can see
// which handler a job reached.
func record(calls *[]string, name string) handlers.Handler {
	return handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		*calls = append(*calls, name)
		return nil
	})
}

func TestMuxRoutesByKind(t *testing.T) {
	t.Parallel()
	var calls []string
	m := handlers.NewMux()
	m.Handle("email", record(&calls, "email"))
	m.Handle("sms", record(&calls, "sms"))
	m.HandleFunc("push", func(context.Context, *handlers.Job) error {
		calls = append(calls, "push")
		return nil
	})

	// Each kind must reach its own handler and no other; running them in
	// an order unlike registration order catches a Mux that ignores kind.
	for _, kind := range []string{"sms", "push", "email", "sms"} {
		if err := m.ProcessJob(t.Context(), newJob(kind, nil)); err != nil {
			t.Fatalf("ProcessJob(%q) = %v, want nil", kind, err)
		}
	}
	if want := []string{"sms", "push", "email", "sms"}; !slices.Equal(calls, want) {
		t.Fatalf("handlers called %v, want %v", calls, want)
	}
}

func TestMuxPassesHandlerErrorAndArguments(t *testing.T) {
	t.Parallel()
	// The Mux must hand over the caller's context and job unchanged and
	// return the handler's error as is, not wrapped or swallowed.
	type ctxKey struct{}
	sentinel := errors.New("boom")
	job := newJob("email", []byte(`{}`))
	ctx := context.WithValue(t.Context(), ctxKey{}, "marker")

	m := handlers.NewMux()
	m.HandleFunc("email", func(gotCtx context.Context, gotJob *handlers.Job) error {
		if gotJob != job {
			t.Errorf("handler got job %p, want %p", gotJob, job)
		}
		if gotCtx.Value(ctxKey{}) != "marker" {
			t.Error("handler did not get the caller's context")
		}
		return sentinel
	})
	if err := m.ProcessJob(ctx, job); err != sentinel {
		t.Fatalf("ProcessJob = %v, want the handler's error %v unchanged", err, sentinel)
	}
}

// NoHandler: a give-back only for the job's own kind and only while no
// Mux ran a handler for it; a router of one's own is believed.
func TestNoHandler(t *testing.T) {
	t.Parallel()
	unknown := func(kind string) error { return handlers.Permanent(&handlers.UnknownKindError{Kind: kind}) }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the job's kind", unknown("email"), true},
		{"wrapped", fmt.Errorf("route: %w", unknown("email")), true},
		{"another kind", unknown("sub"), false},
		{"another error", errors.New("boom"), false},
		{"nil", nil, false},
	} {
		if got := handlers.NoHandler(newJob("email", nil), tc.err); got != tc.want {
			t.Errorf("%s: NoHandler = %v, want %v", tc.name, got, tc.want)
		}
	}

	// A Mux without the kind: no handler ran.
	j := newJob("email", nil)
	if err := handlers.NewMux().ProcessJob(t.Context(), j); !handlers.NoHandler(j, err) {
		t.Errorf("NoHandler of an empty Mux's error %v = false, want true", err)
	}
	// A Mux that ran the job's handler, whose nested Mux lacks the kind:
	// the handler failed.
	inner, outer := handlers.NewMux(), handlers.NewMux()
	outer.HandleFunc("email", inner.ProcessJob)
	j = newJob("email", nil)
	if err := outer.ProcessJob(t.Context(), j); err == nil || handlers.NoHandler(j, err) {
		t.Errorf("NoHandler of a nested Mux's error %v = true, want false", err)
	}
}

func TestMuxUnknownKindIsPermanent(t *testing.T) {
	t.Parallel()
	m := handlers.NewMux()
	m.HandleFunc("email", func(context.Context, *handlers.Job) error {
		t.Error("the email handler ran for a job of another kind")
		return nil
	})

	err := m.ProcessJob(t.Context(), newJob("resize-image", nil))
	if err == nil {
		t.Fatal("ProcessJob of an unregistered kind = nil, want an error")
	}
	// The worker retries anything that is not permanent; an unknown kind
	// can never succeed, so it must be permanent.
	var perm *handlers.PermanentError
	if !errors.As(err, &perm) {
		t.Fatalf("error %v (%T) is not a *PermanentError", err, err)
	}
	var unknown *handlers.UnknownKindError
	if !errors.As(err, &unknown) {
		t.Fatalf("error %v does not wrap an *UnknownKindError", err)
	}
	if !errors.Is(err, handlers.ErrUnknownKind) {
		t.Errorf("error %v does not match handlers.ErrUnknownKind", err)
	}
	if unknown.Kind != "resize-image" {
		t.Errorf("UnknownKindError.Kind = %q, want %q", unknown.Kind, "resize-image")
	}
	// An operator reading last_error needs the kind.
	if !strings.Contains(err.Error(), `"resize-image"`) {
		t.Errorf("error %q does not name the kind", err)
	}
}

func TestMuxHandlePanics(t *testing.T) {
	t.Parallel()
	noop := handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return nil })
	tests := []struct {
		name string
		want string // part of the panic message
		fn   func(m *handlers.Mux)
	}{
		{"empty kind", "empty kind", func(m *handlers.Mux) { m.Handle("", noop) }},
		{"nil handler", "nil handler", func(m *handlers.Mux) { m.Handle("email", nil) }},
		{"nil function", "nil function", func(m *handlers.Mux) { m.HandleFunc("email", nil) }},
		{"registered twice", "registered twice", func(m *handlers.Mux) {
			m.Handle("email", noop)
			m.Handle("email", noop)
		}},
		{"registered twice via HandleFunc", "registered twice", func(m *handlers.Mux) {
			m.Handle("email", noop)
			m.HandleFunc("email", func(context.Context, *handlers.Job) error { return nil })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := handlers.NewMux()
			mustPanic(t, tt.want, func() { tt.fn(m) })
		})
	}
}

func TestMuxHandlePanicKeepsMuxUsable(t *testing.T) {
	t.Parallel()
	// Handle panics while holding the Mux's lock; if the lock were not
	// released the next call would deadlock instead of returning.
	m := handlers.NewMux()
	m.Handle("email", handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return nil }))
	mustPanic(t, "registered twice", func() {
		m.Handle("email", handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return nil }))
	})
	if got := m.Kinds(); !slices.Equal(got, []string{"email"}) {
		t.Fatalf("Kinds() after a rejected registration = %v, want [email]", got)
	}
	if err := m.ProcessJob(t.Context(), newJob("email", nil)); err != nil {
		t.Fatalf("ProcessJob after a rejected registration = %v, want nil", err)
	}
}

func TestMuxZeroValue(t *testing.T) {
	t.Parallel()
	// The zero Mux has a nil map; Handle must allocate it rather than
	// panic with "assignment to entry in nil map".
	var m handlers.Mux
	if got := m.Kinds(); len(got) != 0 {
		t.Fatalf("Kinds() of a zero Mux = %v, want none", got)
	}
	err := m.ProcessJob(t.Context(), newJob("email", nil))
	var unknown *handlers.UnknownKindError
	if !errors.As(err, &unknown) {
		t.Fatalf("ProcessJob on an empty zero Mux = %v, want an *UnknownKindError", err)
	}

	ran := false
	m.HandleFunc("email", func(context.Context, *handlers.Job) error { ran = true; return nil })
	if err := m.ProcessJob(t.Context(), newJob("email", nil)); err != nil {
		t.Fatalf("ProcessJob = %v, want nil", err)
	}
	if !ran {
		t.Fatal("the handler registered on a zero Mux did not run")
	}
}

func TestMuxKindsSorted(t *testing.T) {
	t.Parallel()
	m := handlers.NewMux()
	noop := handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return nil })
	// Registered out of order, so an unsorted (map-order or insertion-order)
	// Kinds fails.
	for _, k := range []string{"zeta", "alpha", "mu", "beta", "Zulu"} {
		m.Handle(k, noop)
	}
	want := []string{"Zulu", "alpha", "beta", "mu", "zeta"}
	if got := m.Kinds(); !slices.Equal(got, want) {
		t.Fatalf("Kinds() = %v, want %v", got, want)
	}
}

func TestMuxConcurrentUse(t *testing.T) {
	t.Parallel()
	// The Mux promises registering while a pool runs is allowed; under
	// -race this catches unsynchronised map access.
	m := handlers.NewMux()
	m.HandleFunc("base", func(context.Context, *handlers.Job) error { return nil })
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			m.HandleFunc("kind-"+strconv.Itoa(i), func(context.Context, *handlers.Job) error { return nil })
		}
	}()
	for range 200 {
		if err := m.ProcessJob(t.Context(), newJob("base", nil)); err != nil {
			t.Fatalf("ProcessJob = %v, want nil", err)
		}
		_ = m.Kinds()
	}
	<-done
	if got := len(m.Kinds()); got != 51 {
		t.Fatalf("len(Kinds()) = %d, want 51", got)
	}
}

type emailArgs struct {
	To      string   `json:"to"`
	Subject string   `json:"subject"`
	CC      []string `json:"cc"`
}

func TestJSONDecodesPayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		payload string
		want    emailArgs
	}{
		{"all fields", `{"to":"a@example.com","subject":"hi","cc":["b@example.com"]}`,
			emailArgs{To: "a@example.com", Subject: "hi", CC: []string{"b@example.com"}}},
		// encoding/json ignores unknown fields and the doc promises the same.
		{"unknown fields ignored", `{"to":"a@example.com","priority":3}`,
			emailArgs{To: "a@example.com"}},
		{"empty object", `{}`, emailArgs{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := newJob("email", []byte(tt.payload))
			var got emailArgs
			calls := 0
			h := handlers.JSON(func(_ context.Context, gotJob *handlers.Job, args emailArgs) error {
				calls++
				if gotJob != job {
					t.Errorf("typed handler got job %p, want %p", gotJob, job)
				}
				got = args
				return nil
			})
			if err := h.ProcessJob(t.Context(), job); err != nil {
				t.Fatalf("ProcessJob = %v, want nil", err)
			}
			if calls != 1 {
				t.Fatalf("typed handler called %d times, want 1", calls)
			}
			if got.To != tt.want.To || got.Subject != tt.want.Subject || !slices.Equal(got.CC, tt.want.CC) {
				t.Fatalf("args = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestJSONReturnsHandlerError(t *testing.T) {
	t.Parallel()
	// A handler's own (retryable) error must come back unwrapped, not be
	// turned into a permanent one like a decode failure.
	sentinel := errors.New("smtp unavailable")
	h := handlers.JSON(func(context.Context, *handlers.Job, emailArgs) error { return sentinel })
	err := h.ProcessJob(t.Context(), newJob("email", []byte(`{}`)))
	if err != sentinel {
		t.Fatalf("ProcessJob = %v, want %v", err, sentinel)
	}
}

func TestJSONMalformedPayloadIsPermanent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		payload []byte
	}{
		{"truncated", []byte(`{"to":`)},
		{"wrong type", []byte(`{"to":42}`)},
		{"not JSON", []byte(`hello`)},
		{"empty", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := handlers.JSON(func(context.Context, *handlers.Job, emailArgs) error {
				t.Error("typed handler called with a payload that does not decode")
				return nil
			})
			err := h.ProcessJob(t.Context(), newJob("send-email", tt.payload))
			var perm *handlers.PermanentError
			if !errors.As(err, &perm) {
				t.Fatalf("ProcessJob = %v (%T), want a *PermanentError", err, err)
			}
			msg := err.Error()
			for _, want := range []string{"send-email", "emailArgs"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not mention %q", msg, want)
				}
			}
		})
	}
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	t.Run("nil", func(t *testing.T) {
		t.Parallel()
		// Permanent(nil) must not return nil: a handler returning it would
		// otherwise settle the job as done.
		err := handlers.Permanent(nil)
		if err == nil {
			t.Fatal("Permanent(nil) = nil, want a non-nil error")
		}
		var perm *handlers.PermanentError
		if !errors.As(err, &perm) {
			t.Fatalf("Permanent(nil) = %T, want a *PermanentError", err)
		}
		// Error() dereferences Err, so it must have been filled in.
		if perm.Err == nil {
			t.Fatal("Permanent(nil).Err = nil")
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "permanent: ") {
			t.Errorf("Error() = %q, want a \"permanent: \" prefix", msg)
		}
	})
	t.Run("zero value", func(t *testing.T) {
		t.Parallel()
		// Built by hand rather than by Permanent: printing it must not panic.
		if msg := (&handlers.PermanentError{}).Error(); msg != "permanent failure" {
			t.Errorf("Error() = %q", msg)
		}
	})
	t.Run("wraps", func(t *testing.T) {
		t.Parallel()
		cause := errors.New("bad request")
		err := handlers.Permanent(cause)
		if !errors.Is(err, cause) {
			t.Fatalf("errors.Is(Permanent(err), err) = false for %v", err)
		}
		if got := errors.Unwrap(err); got != cause {
			t.Fatalf("errors.Unwrap = %v, want %v", got, cause)
		}
		if want := "permanent: bad request"; err.Error() != want {
			t.Errorf("Error() = %q, want %q", err.Error(), want)
		}
	})
	t.Run("found when wrapped further", func(t *testing.T) {
		t.Parallel()
		// The worker looks for a *PermanentError anywhere in the chain.
		err := errors.Join(errors.New("context"), handlers.Permanent(errors.New("x")))
		var perm *handlers.PermanentError
		if !errors.As(err, &perm) {
			t.Fatalf("errors.As did not find the *PermanentError in %v", err)
		}
	})
}

func TestSnooze(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   time.Duration
		want time.Duration
	}{
		{"positive", 90 * time.Second, 90 * time.Second},
		{"zero", 0, 0},
		{"negative becomes zero", -5 * time.Second, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := handlers.Snooze(tt.in)
			var snooze *handlers.SnoozeError
			if !errors.As(err, &snooze) {
				t.Fatalf("Snooze(%v) = %T, want a *SnoozeError", tt.in, err)
			}
			if snooze.Delay != tt.want {
				t.Fatalf("Snooze(%v).Delay = %v, want %v", tt.in, snooze.Delay, tt.want)
			}
			// A snooze is not a failure; it must not look permanent.
			var perm *handlers.PermanentError
			if errors.As(err, &perm) {
				t.Fatal("a snooze error is also a *PermanentError")
			}
		})
	}
}

func TestJobProgress(t *testing.T) {
	t.Parallel()
	t.Run("no reporter", func(t *testing.T) {
		t.Parallel()
		job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "id", Queue: "q", Kind: "k", Attempt: 1, MaxAttempts: 1, Generation: 1}})
		if err := job.Progress(t.Context(), []byte("50%")); err == nil {
			t.Fatal("Progress with no reporter = nil, want an error")
		}
	})
	t.Run("reporter", func(t *testing.T) {
		t.Parallel()
		type ctxKey struct{}
		ctx := context.WithValue(t.Context(), ctxKey{}, "marker")
		var got []byte
		calls := 0
		job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "id", Queue: "q", Kind: "k", Attempt: 1, MaxAttempts: 1, Generation: 1}, Progress: func(c context.Context, data []byte) error {
			calls++
			got = data
			if c.Value(ctxKey{}) != "marker" {
				t.Error("reporter did not get the caller's context")
			}
			return nil
		}})
		if err := job.Progress(ctx, []byte(`{"done":3}`)); err != nil {
			t.Fatalf("Progress = %v, want nil", err)
		}
		if calls != 1 || !bytes.Equal(got, []byte(`{"done":3}`)) {
			t.Fatalf("reporter called %d times with %q, want once with %q", calls, got, `{"done":3}`)
		}
	})
	t.Run("reporter error", func(t *testing.T) {
		t.Parallel()
		// A fenced reporter returns ErrLeaseLost; Progress must pass it on
		// so the handler can stop.
		job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "id", Queue: "q", Kind: "k", Attempt: 1, MaxAttempts: 1, Generation: 1}, Progress: func(context.Context, []byte) error {
			return handlers.ErrLeaseLost
		}})
		if err := job.Progress(t.Context(), nil); !errors.Is(err, handlers.ErrLeaseLost) {
			t.Fatalf("Progress = %v, want %v", err, handlers.ErrLeaseLost)
		}
	})
}

func TestNewJobFields(t *testing.T) {
	t.Parallel()
	payload := []byte(`{"a":1}`)
	job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{
		ID: "id-9", Queue: "mail", Kind: "email", Payload: payload, Attempt: 2, MaxAttempts: 10, Generation: 42,
	}})
	if job.ID != "id-9" || job.Queue != "mail" || job.Kind != "email" ||
		!bytes.Equal(job.Payload, payload) || job.Attempt != 2 || job.MaxAttempts != 10 || job.Generation != 42 {
		t.Fatalf("NewJob fields = %+v", job)
	}
	if job.Result() != nil {
		t.Fatalf("Result() of a new job = %q, want nil", job.Result())
	}
}

func TestJobResult(t *testing.T) {
	t.Parallel()
	job := newJob("email", nil)
	job.SetResult([]byte("first"))
	job.SetResult([]byte(`{"sent":true}`)) // the last call wins
	if got := job.Result(); !bytes.Equal(got, []byte(`{"sent":true}`)) {
		t.Fatalf("Result() = %q, want %q", got, `{"sent":true}`)
	}
}

func TestJobContext(t *testing.T) {
	t.Parallel()
	t.Run("round trip", func(t *testing.T) {
		t.Parallel()
		job := newJob("email", nil)
		ctx := handlers.WithJob(t.Context(), job)
		got, ok := handlers.JobFromContext(ctx)
		if !ok || got != job {
			t.Fatalf("JobFromContext = %p, %v; want %p, true", got, ok, job)
		}
		// A derived context (as middleware makes) still carries it.
		child, cancel := context.WithCancel(ctx)
		defer cancel()
		if got, ok := handlers.JobFromContext(child); !ok || got != job {
			t.Fatalf("JobFromContext(child) = %p, %v; want %p, true", got, ok, job)
		}
	})
	t.Run("bare context", func(t *testing.T) {
		t.Parallel()
		got, ok := handlers.JobFromContext(t.Context())
		if ok || got != nil {
			t.Fatalf("JobFromContext(bare) = %p, %v; want nil, false", got, ok)
		}
	})
}
