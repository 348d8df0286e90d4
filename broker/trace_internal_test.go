package broker

import (
	"context"
	"errors"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// tracedBroker is a broker on a fresh miniredis whose spans a recorder
// keeps.
func tracedBroker(t *testing.T) (*Broker, *tracetest.SpanRecorder, trace.Tracer) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := New(c, Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	return b, rec, tp.Tracer("test")
}

func attrOf(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, s sdktrace.ReadOnlySpan, key, want string) {
	t.Helper()
	v, ok := attrOf(s, key)
	if !ok || v.String() != want {
		t.Errorf("span %q: %s = %q (set: %v), want %q", s.Name(), key, v.String(), ok, want)
	}
}

// carried is the span context a job's metadata carries.
func carried(md map[string]string) trace.SpanContext {
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(md)))
}

// The producer span's parent is the span in ctx; its own context goes into
// a copy of the job's metadata, beside the caller's keys, replacing any
// trace context there (a tracestate the new context lacks included), and
// the caller's map is left as it was.
func TestTraceEnqueueParentsOnContextSpan(t *testing.T) {
	b, rec, tr := tracedBroker(t)
	ctx, req := tr.Start(context.Background(), "request")
	mine := map[string]string{"tenant": "acme", "tracestate": "vendor=stale"}
	j := Job{Queue: "q", Kind: "k", Metadata: mine}
	span := b.traceEnqueue(ctx, &j)
	span.End()
	req.End()

	if len(mine) != 2 {
		t.Errorf("the caller's metadata was changed: %v", mine)
	}
	if j.Metadata["tenant"] != "acme" {
		t.Errorf("the caller's keys were not kept: %v", j.Metadata)
	}
	if _, ok := j.Metadata["tracestate"]; ok {
		t.Errorf("a tracestate not the producer's survived: %v", j.Metadata)
	}
	producer := rec.Ended()[0]
	if got := carried(j.Metadata); got.SpanID() != producer.SpanContext().SpanID() || got.TraceID() != req.SpanContext().TraceID() {
		t.Errorf("metadata carries %v, want the producer span %v", got, producer.SpanContext())
	}
	if producer.Parent().SpanID() != req.SpanContext().SpanID() {
		t.Errorf("producer's parent = %v, want the request span %v", producer.Parent().SpanID(), req.SpanContext().SpanID())
	}
	if producer.SpanKind() != trace.SpanKindProducer || producer.Name() != "enqueue q" {
		t.Errorf("producer span = %q of kind %v", producer.Name(), producer.SpanKind())
	}
}

// With no span in ctx, a trace context already in the metadata (the
// outbox's, written with the row) is the parent, and is replaced by the
// producer's own; the parent's tracestate goes on with it, as W3C trace
// context asks.
func TestTraceEnqueueParentsOnCarriedContext(t *testing.T) {
	b, rec, tr := tracedBroker(t)
	_, outer := tr.Start(context.Background(), "the request that wrote the row")
	outer.End()
	md := map[string]string{"tracestate": "vendor=old"}
	propagation.TraceContext{}.Inject(trace.ContextWithSpan(context.Background(), outer), propagation.MapCarrier(md))
	old := md["traceparent"]
	j := Job{Queue: "q", Kind: "k", Metadata: md}
	b.traceEnqueue(context.Background(), &j).End()

	producer := rec.Ended()[1]
	if producer.Parent().SpanID() != outer.SpanContext().SpanID() || producer.SpanContext().TraceID() != outer.SpanContext().TraceID() {
		t.Errorf("producer's parent = %v, want the carried %v", producer.Parent(), outer.SpanContext())
	}
	if j.Metadata["traceparent"] == old || carried(j.Metadata).SpanID() != producer.SpanContext().SpanID() {
		t.Errorf("metadata still carries the old context: %v", j.Metadata)
	}
	if j.Metadata["tracestate"] != "vendor=old" {
		t.Errorf("the parent's tracestate was not carried on: %v", j.Metadata)
	}
	if md["traceparent"] != old {
		t.Errorf("the caller's metadata was changed: %v", md)
	}
}

// Without a tracer provider, Enqueue under a caller's span writes no
// trace context: the job hash has no meta field.
func TestTraceEnqueueOff(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.TracerProvider() != nil {
		t.Fatal("TracerProvider() is not nil")
	}
	ctx, req := sdktrace.NewTracerProvider().Tracer("test").Start(context.Background(), "request")
	defer req.End()
	id, err := b.Client().Enqueue(ctx, Job{Queue: "q", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	fields, err := c.HGetAll(ctx, b.queueKeys("q").job+id).Result()
	if err != nil || fields["kind"] != "k" {
		t.Fatalf("job hash: %v, %v", fields, err)
	}
	if m, ok := fields["meta"]; ok {
		t.Fatalf("an untraced enqueue wrote meta %q", m)
	}
}

// Each enqueue path ends one producer span per job with what came of it:
// the job's id, and error status only for a real failure — a unique key
// held or a duplicate id is an answer, not an error.
func TestEnqueueSpanOutcomes(t *testing.T) {
	b, rec, _ := tracedBroker(t)
	ctx := context.Background()
	id, err := b.Client().Enqueue(ctx, Job{Queue: "q", Kind: "k", UniqueKey: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client().Enqueue(ctx, Job{Queue: "q", Kind: "k", UniqueKey: "u"}); !errors.Is(err, ErrUniqueHeld) {
		t.Fatalf("second unique enqueue: %v", err)
	}
	res := b.Client().EnqueueMany(ctx, []Job{{Queue: "q", Kind: "k", ID: "mine"}, {Queue: "q", Kind: "k", ID: "mine"}, {Queue: "q", Kind: ""}})
	bt, err := NewBatcher(b.Client(), BatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bid, err := bt.Enqueue(ctx, Job{Queue: "q2", Kind: "k2"})
	if err != nil {
		t.Fatal(err)
	}
	_ = bt.Close()

	spans := rec.Ended()
	if len(spans) != 6 {
		t.Fatalf("%d spans ended, want 6 (one per job)", len(spans))
	}
	for _, s := range spans {
		wantAttr(t, s, "messaging.system", "fenceq")
		wantAttr(t, s, "messaging.operation.type", "send")
	}
	first, held, mine, dup, bad, batched := spans[0], spans[1], spans[2], spans[3], spans[4], spans[5]
	wantAttr(t, first, "messaging.message.id", id)
	wantAttr(t, first, "messaging.destination.name", "q")
	wantAttr(t, first, "fenceq.job.kind", "k")
	wantAttr(t, held, "messaging.message.id", id)
	wantAttr(t, held, "fenceq.enqueue.result", "unique_held")
	wantAttr(t, mine, "messaging.message.id", "mine")
	wantAttr(t, dup, "fenceq.enqueue.result", "duplicate")
	wantAttr(t, batched, "messaging.message.id", bid)
	wantAttr(t, batched, "messaging.destination.name", "q2")
	for _, s := range []sdktrace.ReadOnlySpan{first, held, mine, dup, batched} {
		if s.Status().Code != codes.Unset {
			t.Errorf("span %s status = %v, want unset", s.Name(), s.Status())
		}
	}
	if bad.Status().Code != codes.Error || len(bad.Events()) == 0 || bad.Events()[0].Name != "exception" {
		t.Errorf("a refused job's span: status %v, events %v; want error and the error recorded", bad.Status(), bad.Events())
	}
	if res[2].Err == nil {
		t.Fatal("a job without a kind was enqueued")
	}
}
