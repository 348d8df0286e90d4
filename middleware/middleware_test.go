package middleware_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/jobrow"
	"github.com/fenceq/fenceq/middleware"
)

// testJob builds a job with distinct, recognisable field values so a log
// test can tell them apart.
func testJob(kind string) *handlers.Job {
	return handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "job-42", Queue: "mail", Kind: kind, Payload: []byte(`{}`), Attempt: 3, MaxAttempts: 5, Generation: 17}})
}

// returning is a handler that returns err.
func returning(err error) handlers.Handler {
	return handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return err })
}

// ---- Chain ----

// trace is an order log shared by the middleware and handler of one test.
type trace struct {
	mu    sync.Mutex
	steps []string
}

func (tr *trace) add(s string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.steps = append(tr.steps, s)
}

func (tr *trace) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.steps)
}

// tracing is a middleware that records name before and after calling the
// next handler.
func tracing(tr *trace, name string) middleware.Middleware {
	return func(next handlers.Handler) handlers.Handler {
		return handlers.HandlerFunc(func(ctx context.Context, job *handlers.Job) error {
			tr.add(name + " in")
			err := next.ProcessJob(ctx, job)
			tr.add(name + " out")
			return err
		})
	}
}

func TestChain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		names []string
		want  []string
	}{
		{"none", nil, []string{"h"}},
		{"one", []string{"a"}, []string{"a in", "h", "a out"}},
		// First is outermost: a sees the job first and the result last.
		{"three", []string{"a", "b", "c"},
			[]string{"a in", "b in", "c in", "h", "c out", "b out", "a out"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := &trace{}
			var mws []middleware.Middleware
			for _, n := range tt.names {
				mws = append(mws, tracing(tr, n))
			}
			sentinel := errors.New("from h")
			h := handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
				tr.add("h")
				return sentinel
			})
			// The handler's error must travel back out through every layer.
			if err := middleware.Chain(mws...)(h).ProcessJob(t.Context(), testJob("k")); err != sentinel {
				t.Fatalf("chained ProcessJob = %v, want %v", err, sentinel)
			}
			if got := tr.get(); !slices.Equal(got, tt.want) {
				t.Fatalf("order = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestChainIsReusable(t *testing.T) {
	t.Parallel()
	// A Middleware made by Chain may wrap several handlers; wrapping one
	// must not change what wrapping another does.
	tr := &trace{}
	mw := middleware.Chain(tracing(tr, "a"), tracing(tr, "b"))
	h1 := mw(handlers.HandlerFunc(func(context.Context, *handlers.Job) error { tr.add("h1"); return nil }))
	h2 := mw(handlers.HandlerFunc(func(context.Context, *handlers.Job) error { tr.add("h2"); return nil }))
	for _, h := range []handlers.Handler{h1, h2} {
		if err := h.ProcessJob(t.Context(), testJob("k")); err != nil {
			t.Fatalf("ProcessJob = %v, want nil", err)
		}
	}
	want := []string{"a in", "b in", "h1", "b out", "a out", "a in", "b in", "h2", "b out", "a out"}
	if got := tr.get(); !slices.Equal(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
}

// ---- Recover ----

func TestRecoverPanic(t *testing.T) {
	t.Parallel()
	errValue := errors.New("an error value")
	tests := []struct {
		name    string
		value   any
		wantMsg string // must appear in Error()
	}{
		{"string", "kaboom", "kaboom"},
		{"error", errValue, "an error value"},
		{"int", 1234, "1234"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := middleware.Recover()(handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
				panic(tt.value)
			}))
			err := h.ProcessJob(t.Context(), testJob("k"))
			var pe *middleware.PanicError
			if !errors.As(err, &pe) {
				t.Fatalf("ProcessJob = %v (%T), want a *PanicError", err, err)
			}
			if pe.Value != tt.value {
				t.Errorf("PanicError.Value = %#v, want %#v", pe.Value, tt.value)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("Error() does not contain the panic value %q:\n%s", tt.wantMsg, msg)
			}
			// The stack is what makes last_error useful; debug.Stack
			// output starts with "goroutine N [running]:".
			if !strings.Contains(msg, "goroutine") {
				t.Errorf("Error() has no stack trace:\n%s", msg)
			}
			// Taken in the deferred recover, the stack still holds the
			// panicking frame, i.e. this test's closure.
			if !strings.Contains(string(pe.Stack), "TestRecoverPanic") {
				t.Errorf("stack does not show the panicking handler:\n%s", pe.Stack)
			}
		})
	}
}

func TestRecoverPanicNil(t *testing.T) {
	t.Parallel()
	// Since Go 1.21 panic(nil) recovers as a *runtime.PanicNilError, so
	// it must not be mistaken for "no panic" and settle the job as done.
	h := middleware.Recover()(handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		panic(nil)
	}))
	var pe *middleware.PanicError
	if err := h.ProcessJob(t.Context(), testJob("k")); !errors.As(err, &pe) {
		t.Fatalf("ProcessJob after panic(nil) = %v, want a *PanicError", err)
	}
}

func TestRecoverPassesThrough(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("ordinary failure")
	tests := []struct {
		name string
		err  error
	}{
		{"nil", nil},
		{"error", sentinel},
		{"permanent", handlers.Permanent(sentinel)},
		{"snooze", handlers.Snooze(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := middleware.Recover()(returning(tt.err)).ProcessJob(t.Context(), testJob("k"))
			if err != tt.err {
				t.Fatalf("ProcessJob = %v, want %v unchanged", err, tt.err)
			}
		})
	}
}

// ---- Logging ----

// logCapture is a debug-level JSON logger whose output a test can parse
// back into records.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(c, &slog.HandlerOptions{Level: level}))
}

// records parses every logged line; a line that is not JSON fails the test.
func (c *logCapture) records(t *testing.T) []map[string]any {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var recs []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(c.buf.Bytes()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// only returns the single record with message msg, failing the test if
// there is not exactly one.
func only(t *testing.T, recs []map[string]any, msg string) map[string]any {
	t.Helper()
	var found []map[string]any
	for _, r := range recs {
		if r[slog.MessageKey] == msg {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d records with message %q, want 1; all records: %v", len(found), msg, recs)
	}
	return found[0]
}

// checkJobAttrs fails unless rec carries testJob's attributes under "job".
func checkJobAttrs(t *testing.T, rec map[string]any, kind string) {
	t.Helper()
	group, ok := rec["job"].(map[string]any)
	if !ok {
		t.Fatalf("record has no \"job\" group: %v", rec)
	}
	// JSON numbers decode as float64.
	want := map[string]any{"queue": "mail", "id": "job-42", "kind": kind, "attempt": 3.0, "generation": 17.0}
	for k, v := range want {
		if group[k] != v {
			t.Errorf("job.%s = %#v, want %#v (record %v)", k, group[k], v, rec)
		}
	}
}

func TestLogging(t *testing.T) {
	t.Parallel()
	failure := errors.New("smtp: connection refused")
	tests := []struct {
		name      string
		err       error
		wantMsg   string
		wantLevel string
		check     func(t *testing.T, rec map[string]any)
	}{
		{"success", nil, "job succeeded", "INFO", func(t *testing.T, rec map[string]any) {
			if _, ok := rec["error"]; ok {
				t.Errorf("a success logged an error: %v", rec)
			}
		}},
		{"failure", failure, "job failed", "WARN", func(t *testing.T, rec map[string]any) {
			if rec["error"] != failure.Error() {
				t.Errorf("error = %#v, want %q", rec["error"], failure.Error())
			}
		}},
		{"permanent failure", handlers.Permanent(failure), "job failed", "WARN", func(t *testing.T, rec map[string]any) {
			if rec["error"] != "permanent: "+failure.Error() {
				t.Errorf("error = %#v, want %q", rec["error"], "permanent: "+failure.Error())
			}
		}},
		{"snooze", handlers.Snooze(time.Minute), "job snoozed", "INFO", func(t *testing.T, rec map[string]any) {
			// slog's JSON handler writes a Duration as nanoseconds.
			if rec["delay"] != float64(time.Minute) {
				t.Errorf("delay = %#v, want %v", rec["delay"], float64(time.Minute))
			}
		}},
		// The middleware uses errors.As, so a wrapped snooze is a snooze.
		{"wrapped snooze", fmt.Errorf("not ready: %w", handlers.Snooze(time.Second)), "job snoozed", "INFO", nil},
		// The pool gives such a job back and warns once per kind.
		{"no handler for the kind", handlers.Permanent(&handlers.UnknownKindError{Kind: "email"}), "job has no handler for its kind", "DEBUG", nil},
		{"another kind unknown to the handler", handlers.Permanent(&handlers.UnknownKindError{Kind: "sub"}), "job failed", "WARN", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var c logCapture
			h := middleware.Logging(c.logger(slog.LevelDebug))(returning(tt.err))
			// Logging must return exactly what the handler returned; the
			// worker decides what to do with it.
			if err := h.ProcessJob(t.Context(), testJob("email")); err != tt.err {
				t.Fatalf("ProcessJob = %v, want %v", err, tt.err)
			}
			recs := c.records(t)
			if len(recs) != 2 {
				t.Fatalf("logged %d records, want 2 (start and end): %v", len(recs), recs)
			}
			start := only(t, recs, "job started")
			if start[slog.LevelKey] != "DEBUG" {
				t.Errorf("job started level = %v, want DEBUG", start[slog.LevelKey])
			}
			checkJobAttrs(t, start, "email")

			end := only(t, recs, tt.wantMsg)
			if end[slog.LevelKey] != tt.wantLevel {
				t.Errorf("%s level = %v, want %s", tt.wantMsg, end[slog.LevelKey], tt.wantLevel)
			}
			checkJobAttrs(t, end, "email")
			if _, ok := end["duration"].(float64); !ok {
				t.Errorf("%s has no numeric duration: %v", tt.wantMsg, end)
			}
			// The context was never cancelled, so there is no cause.
			if _, ok := end["cause"]; ok {
				t.Errorf("%s has a cause although the context is live: %v", tt.wantMsg, end)
			}
			if tt.check != nil {
				tt.check(t, end)
			}
		})
	}
}

// A handler that a Mux ran failed when a Mux nested in it lacks the job's
// kind: Logging warns, since the pool fails the job rather than give it
// back.
func TestLoggingUnknownKindInsideAHandler(t *testing.T) {
	t.Parallel()
	var c logCapture
	inner, outer := handlers.NewMux(), handlers.NewMux()
	outer.HandleFunc("email", inner.ProcessJob)
	h := middleware.Logging(c.logger(slog.LevelDebug))(outer)
	if err := h.ProcessJob(t.Context(), testJob("email")); !errors.Is(err, handlers.ErrUnknownKind) {
		t.Fatalf("ProcessJob = %v, want the nested Mux's UnknownKindError", err)
	}
	if end := only(t, c.records(t), "job failed"); end[slog.LevelKey] != "WARN" {
		t.Errorf("job failed level = %v, want WARN", end[slog.LevelKey])
	}
}

func TestLoggingCause(t *testing.T) {
	t.Parallel()
	// When the worker cancels a handler, the log should say why.
	var c logCapture
	ctx, cancel := context.WithCancelCause(t.Context())
	h := middleware.Logging(c.logger(slog.LevelInfo))(handlers.HandlerFunc(
		func(ctx context.Context, _ *handlers.Job) error {
			cancel(handlers.ErrLeaseLost)
			<-ctx.Done()
			return ctx.Err()
		}))
	if err := h.ProcessJob(ctx, testJob("email")); !errors.Is(err, context.Canceled) {
		t.Fatalf("ProcessJob = %v, want context.Canceled", err)
	}
	recs := c.records(t)
	// At info level the debug "job started" record is filtered out.
	if len(recs) != 1 {
		t.Fatalf("logged %d records at info level, want 1: %v", len(recs), recs)
	}
	rec := only(t, recs, "job failed")
	if rec["cause"] != handlers.ErrLeaseLost.Error() {
		t.Errorf("cause = %#v, want %q", rec["cause"], handlers.ErrLeaseLost.Error())
	}
}

func TestLoggingSeesRecoveredPanic(t *testing.T) {
	t.Parallel()
	// Recover inside Logging turns a panic into an error that Logging
	// reports as a failure, as the Recover doc suggests.
	var c logCapture
	h := middleware.Chain(middleware.Logging(c.logger(slog.LevelInfo)), middleware.Recover())(
		handlers.HandlerFunc(func(context.Context, *handlers.Job) error { panic("kaboom") }))
	var pe *middleware.PanicError
	if err := h.ProcessJob(t.Context(), testJob("email")); !errors.As(err, &pe) {
		t.Fatalf("ProcessJob = %v, want a *PanicError", err)
	}
	rec := only(t, c.records(t), "job failed")
	if msg, _ := rec["error"].(string); !strings.Contains(msg, "panic: kaboom") {
		t.Errorf("error = %q, want it to contain %q", msg, "panic: kaboom")
	}
}

// TestLoggingNilLoggerUsesDefault swaps slog's default logger, so it must
// not run in parallel with anything that logs through it.
func TestLoggingNilLoggerUsesDefault(t *testing.T) {
	var c logCapture
	old := slog.Default()
	slog.SetDefault(c.logger(slog.LevelInfo))
	t.Cleanup(func() { slog.SetDefault(old) })

	if err := middleware.Logging(nil)(returning(nil)).ProcessJob(t.Context(), testJob("email")); err != nil {
		t.Fatalf("ProcessJob = %v, want nil", err)
	}
	checkJobAttrs(t, only(t, c.records(t), "job succeeded"), "email")
}

// ---- Timeout ----

// backstop bounds every wait on a limit that should fire within tens of
// milliseconds, so a broken Timeout fails the test rather than hanging it.
const backstop = 5 * time.Second

// deadlineOf runs job through Timeout(def, perKind) and reports the
// deadline, if any, of the context the handler saw.
func deadlineOf(t *testing.T, def time.Duration, perKind map[string]time.Duration, kind string) (time.Duration, bool) {
	t.Helper()
	var (
		left time.Duration
		has  bool
	)
	h := middleware.Timeout(def, perKind)(handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Job) error {
		var dl time.Time
		dl, has = ctx.Deadline()
		left = time.Until(dl)
		return nil
	}))
	if err := h.ProcessJob(t.Context(), testJob(kind)); err != nil {
		t.Fatalf("ProcessJob = %v, want nil", err)
	}
	return left, has
}

func TestTimeoutChoosesLimit(t *testing.T) {
	t.Parallel()
	// Limits here are long (minutes) and only inspected through the
	// context's deadline, so nothing waits and slow machines do not flake.
	perKind := map[string]time.Duration{
		"fast":      time.Minute,
		"unbounded": 0,
		"negative":  -time.Second,
	}
	tests := []struct {
		name string
		def  time.Duration
		kind string
		want time.Duration // 0: no deadline
	}{
		{"per-kind overrides default", time.Hour, "fast", time.Minute},
		{"default for other kinds", time.Hour, "other", time.Hour},
		{"per-kind zero means no limit", time.Hour, "unbounded", 0},
		{"per-kind negative means no limit", time.Hour, "negative", 0},
		{"zero default means no limit", 0, "other", 0},
		{"negative default means no limit", -time.Hour, "other", 0},
		{"per-kind with no default", 0, "fast", time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			left, has := deadlineOf(t, tt.def, perKind, tt.kind)
			if tt.want == 0 {
				if has {
					t.Fatalf("handler context has a deadline %v away, want none", left)
				}
				return
			}
			if !has {
				t.Fatalf("handler context has no deadline, want one %v away", tt.want)
			}
			// Only a little time can pass between setting the deadline and
			// reading it; half the limit is slack enough for any machine
			// and still tells a minute from an hour.
			if left > tt.want || left < tt.want/2 {
				t.Fatalf("deadline is %v away, want about %v", left, tt.want)
			}
		})
	}
}

func TestTimeoutNilMap(t *testing.T) {
	t.Parallel()
	// A nil per-kind map is the common case and must read as "no
	// overrides".
	left, has := deadlineOf(t, time.Hour, nil, "any")
	if !has || left > time.Hour || left < 30*time.Minute {
		t.Fatalf("deadline = %v, %v; want about 1h", left, has)
	}
}

func TestTimeoutExpires(t *testing.T) {
	t.Parallel()
	const limit = 20 * time.Millisecond
	handlerErr := errors.New("upload aborted")
	causes := make(chan error, 1)
	h := middleware.Timeout(time.Hour, map[string]time.Duration{"upload": limit})(
		handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Job) error {
			// Block until the limit fires, with a backstop far above it so
			// a Timeout that never fires fails fast instead of hanging.
			select {
			case <-ctx.Done():
			case <-time.After(backstop):
				causes <- nil
				return errors.New("the limit never fired")
			}
			causes <- context.Cause(ctx)
			return fmt.Errorf("%w: %w", handlerErr, ctx.Err())
		}))

	start := time.Now()
	err := h.ProcessJob(t.Context(), testJob("upload"))
	if elapsed := time.Since(start); elapsed < limit {
		t.Errorf("handler returned after %v, before the %v limit", elapsed, limit)
	}
	if cause := <-causes; cause != middleware.ErrTimeout {
		t.Errorf("context.Cause inside the handler = %v, want middleware.ErrTimeout", cause)
	}
	if err == nil {
		t.Fatal("ProcessJob = nil, want a timeout error")
	}
	msg := err.Error()
	for _, want := range []string{"timeout", "upload", limit.String()} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	// The handler's own error must survive the wrapping.
	if !errors.Is(err, handlerErr) {
		t.Errorf("error %v does not wrap the handler's error", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
	}
	// A timeout is retried, so it must not look permanent.
	var perm *handlers.PermanentError
	if errors.As(err, &perm) {
		t.Errorf("a timeout error is a *PermanentError: %v", err)
	}
}

func TestTimeoutInTime(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("ordinary failure")
	tests := []struct {
		name string
		err  error
	}{
		{"nil", nil},
		{"error", sentinel},
		{"snooze", handlers.Snooze(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A handler that returns well within its limit gets its
			// result through untouched: no "timeout" wrapping.
			h := middleware.Timeout(time.Minute, nil)(returning(tt.err))
			if err := h.ProcessJob(t.Context(), testJob("k")); err != tt.err {
				t.Fatalf("ProcessJob = %v, want %v unchanged", err, tt.err)
			}
		})
	}
}

func TestTimeoutParentCancelIsNotTimeout(t *testing.T) {
	t.Parallel()
	// If the worker cancels the job (lease lost) before the limit, the
	// cause stays the worker's and the error must not claim a timeout.
	ctx, cancel := context.WithCancelCause(t.Context())
	causes := make(chan error, 1)
	h := middleware.Timeout(time.Hour, nil)(handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Job) error {
		cancel(handlers.ErrLeaseLost)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}))
	err := h.ProcessJob(ctx, testJob("k"))
	if cause := <-causes; cause != handlers.ErrLeaseLost {
		t.Errorf("context.Cause inside the handler = %v, want ErrLeaseLost", cause)
	}
	if err != context.Canceled {
		t.Fatalf("ProcessJob = %v, want context.Canceled unwrapped", err)
	}
}
