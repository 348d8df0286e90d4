package pooltest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// traced swaps the bundle's broker for one (same Redis, same prefix) that
// traces into a recorder, and returns the recorder and a tracer for the
// test's own spans.
func (s *bundle) traced(t *testing.T) (*tracetest.SpanRecorder, trace.Tracer) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b, err := broker.New(s.client, broker.Options{Prefix: s.b.Prefix(), TracerProvider: tp})
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	s.b = b
	return rec, tp.Tracer("pooltest")
}

// processSpans waits until n consumer spans have ended (an attempt's span
// ends when its settlement's answer is known, a little after the job's
// state changed) and returns them, in the order they started.
func processSpans(t *testing.T, rec *tracetest.SpanRecorder, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var out []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.SpanKind() == trace.SpanKindConsumer {
				out = append(out, s)
			}
		}
		if len(out) >= n {
			slices.SortFunc(out, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d consumer spans ended after 10s", len(out), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// spanAttr is the value of a span's attribute, "" when unset.
func spanAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	return slices.ContainsFunc(s.Events(), func(e sdktrace.Event) bool { return e.Name == name })
}

// A job enqueued under a request's span is one trace with it: the producer
// span is the request's child, each attempt's consumer span the producer's
// child with a link to it, carrying the job's attributes and what came of
// the attempt (a failure: retry, with error status; then done), and the
// handler's context holds its attempt's span.
func testTraceAcrossRetry(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	rec, tr := s.traced(t)
	inHandler := make(chan trace.SpanContext, 2)
	s.pool(t, handlers.HandlerFunc(func(ctx context.Context, j *handlers.Job) error {
		inHandler <- trace.SpanContextFromContext(ctx)
		if j.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}))
	ctx, req := tr.Start(context.Background(), "request")
	id, err := s.b.Client().Enqueue(ctx, broker.Job{Queue: s.q, Kind: "send_email"})
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	want(t, "state", s.waitFinal(t, id, 10*time.Second).State, broker.StateDone)
	attempts := processSpans(t, rec, 2)

	var producer sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.SpanKind() == trace.SpanKindProducer {
			producer = sp
		}
	}
	if producer == nil {
		t.Fatal("no producer span")
	}
	traceID := req.SpanContext().TraceID()
	want(t, "producer's trace", producer.SpanContext().TraceID(), traceID)
	want(t, "producer's parent", producer.Parent().SpanID(), req.SpanContext().SpanID())
	want(t, "producer's name", producer.Name(), "enqueue "+s.q)
	want(t, "producer's message id", spanAttr(producer, "messaging.message.id"), id)

	for i, a := range attempts {
		want(t, "consumer's name", a.Name(), "process "+s.q)
		want(t, "consumer's trace", a.SpanContext().TraceID(), traceID)
		want(t, "consumer's parent", a.Parent().SpanID(), producer.SpanContext().SpanID())
		if len(a.Links()) != 1 || a.Links()[0].SpanContext.SpanID() != producer.SpanContext().SpanID() {
			t.Fatalf("attempt %d links %v, want one to the producer", i+1, a.Links())
		}
		for key, v := range map[string]string{
			"messaging.system": "fenceq", "messaging.operation.type": "process", "messaging.destination.name": s.q,
			"messaging.message.id": id, "fenceq.job.kind": "send_email", "fenceq.job.attempt": []string{"1", "2"}[i],
		} {
			want(t, key, spanAttr(a, key), v)
		}
		if spanAttr(a, "fenceq.job.generation") == "" {
			t.Fatalf("attempt %d has no generation", i+1)
		}
		if sc := recv(t, "a handler run", inHandler, time.Second); !sc.Equal(a.SpanContext()) {
			t.Fatalf("attempt %d's handler ran in span %v, want its attempt's %v", i+1, sc, a.SpanContext())
		}
	}
	want(t, "first outcome", spanAttr(attempts[0], "fenceq.job.outcome"), "retry")
	want(t, "first status", attempts[0].Status().Code, codes.Error)
	if !hasEvent(attempts[0], "exception") {
		t.Fatalf("the first attempt's error was not recorded: %v", attempts[0].Events())
	}
	want(t, "second outcome", spanAttr(attempts[1], "fenceq.job.outcome"), "done")
	want(t, "second status", attempts[1].Status().Code, codes.Unset)
}

// A lease taken from a running handler shows on its attempt's span as the
// event "lease lost" and the outcome "lease lost".
func testTraceLeaseLost(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	rec, _ := s.traced(t)
	started := make(chan struct{}, 1)
	s.pool(t, handlers.HandlerFunc(func(ctx context.Context, j *handlers.Job) error {
		if j.Attempt > 1 || j.Generation > 1 {
			return nil // the re-run after the operator's release
		}
		started <- struct{}{}
		<-ctx.Done()
		return nil
	}), func(c *worker.Config) { c.LeaseDuration = 1500 * time.Millisecond })
	id := s.enqueue(t, broker.Job{})
	recv(t, "handler start", started, 10*time.Second)
	if _, err := s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id); err != nil {
		t.Fatal(err)
	}
	s.waitFinal(t, id, 10*time.Second)
	first := processSpans(t, rec, 2)[0]
	want(t, "outcome", spanAttr(first, "fenceq.job.outcome"), "lease lost")
	if !hasEvent(first, "lease lost") {
		t.Fatalf("no lease lost event: %v", first.Events())
	}
}

// A job cancelled while it runs: "cancel requested", then "cancelled".
func testTraceCancel(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	rec, _ := s.traced(t)
	started := make(chan struct{}, 1)
	s.pool(t, handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		return context.Cause(ctx)
	}), func(c *worker.Config) { c.LeaseDuration = 1500 * time.Millisecond })
	id := s.enqueue(t, broker.Job{})
	recv(t, "handler start", started, 10*time.Second)
	if _, err := s.b.Inspector().Cancel(s.ctx, s.q, id); err != nil {
		t.Fatal(err)
	}
	want(t, "state", s.waitFinal(t, id, 10*time.Second).State, broker.StateCancelled)
	span := processSpans(t, rec, 1)[0]
	want(t, "outcome", spanAttr(span, "fenceq.job.outcome"), "cancelled")
	if !hasEvent(span, "cancel requested") {
		t.Fatalf("no cancel requested event: %v", span.Events())
	}
}

// A handler that finishes after its job was taken from it settles stale:
// "stale settlement", outcome "stale".
func testTraceStaleSettlement(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	rec, _ := s.traced(t)
	started, proceed := make(chan struct{}, 1), make(chan struct{})
	s.pool(t, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		if j.Generation > 1 {
			return nil // the re-run after the operator's release
		}
		started <- struct{}{}
		<-proceed // ignores its context on purpose
		return nil
	}), func(c *worker.Config) {
		c.LeaseDuration = time.Minute // the heartbeat stays out of it: the settlement finds the claim gone
		c.Concurrency = 1
	})
	id := s.enqueue(t, broker.Job{})
	recv(t, "handler start", started, 10*time.Second)
	if _, err := s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	s.waitFinal(t, id, 10*time.Second)
	first := processSpans(t, rec, 2)[0]
	want(t, "outcome", spanAttr(first, "fenceq.job.outcome"), "stale")
	if !hasEvent(first, "stale settlement") {
		t.Fatalf("no stale settlement event: %v", first.Events())
	}
}

// With no tracer provider on the broker nothing is traced, not even into
// otel's global provider, and Enqueue writes no trace context: the job
// hash has no meta field.
func testTraceOff(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	rec := tracetest.NewSpanRecorder()
	global := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(global) })
	inHandler := make(chan trace.SpanContext, 1)
	s.pool(t, handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Job) error {
		inHandler <- trace.SpanContextFromContext(ctx)
		return nil
	}))
	ctx, req := otel.Tracer("pooltest").Start(context.Background(), "request")
	id, err := s.b.Client().Enqueue(ctx, broker.Job{Queue: s.q, Kind: "k"})
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	if sc := recv(t, "the handler", inHandler, 10*time.Second); sc.IsValid() {
		t.Fatalf("the handler's context holds a span %v", sc)
	}
	s.waitFinal(t, id, 10*time.Second)
	// A claim and an ack leave the field as Enqueue wrote it.
	fields, err := s.client.HGetAll(s.ctx, s.b.Prefix()+":{"+s.q+"}:job:"+id).Result()
	if err != nil || fields["kind"] != "k" {
		t.Fatalf("job hash: %v, %v", fields, err)
	}
	if m, ok := fields["meta"]; ok {
		t.Fatalf("an untraced enqueue wrote meta %q", m)
	}
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("%d spans ended, want only the test's own request span", n)
	}
}
