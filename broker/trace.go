package broker

import (
	"context"
	"errors"
	"maps"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerScope is the instrumentation scope of fenceq's spans: the producer
// span of each enqueue here, the consumer span of each attempt in worker.
const TracerScope = "github.com/fenceq/fenceq"

// traceContext is how a span's context travels in Job.Metadata (the keys
// traceparent and tracestate): always W3C trace context, whatever the
// global propagator is, since the global default propagates nothing and a
// producer and a worker in different processes must agree.
var traceContext = propagation.TraceContext{}

// The producer span's attributes: OpenTelemetry's messaging conventions
// (written out, to depend on no semconv package version) and fenceq's
// own. fenceq.enqueue.result is set on a job that was not written:
// unique_held (another job holds its unique key; the message id is the
// holder's) or duplicate (its id exists).
var (
	attrSystem        = attribute.String("messaging.system", "fenceq")
	attrOpSend        = attribute.String("messaging.operation.type", "send")
	attrDestination   = attribute.Key("messaging.destination.name")
	attrMessageID     = attribute.Key("messaging.message.id")
	attrKind          = attribute.Key("fenceq.job.kind")
	attrEnqueueUnique = attribute.String("fenceq.enqueue.result", "unique_held")
	attrEnqueueDup    = attribute.String("fenceq.enqueue.result", "duplicate")
)

// traceEnqueue starts j's producer span, `enqueue <queue>`, and writes its
// context into a copy of j.Metadata (the caller's map is left alone), so
// that the job's attempts join the same trace. Call it only when b.tracer
// is set: off, tracing costs the caller's nil check and no call.
//
// The span's parent is the span in ctx when there is one; else a trace
// context j.Metadata already carries (the outbox writes the caller's when
// the row is written, so the relay's enqueue joins that request's trace).
func (b *core) traceEnqueue(ctx context.Context, j *Job) trace.Span {
	parent := ctx
	if !trace.SpanContextFromContext(ctx).IsValid() && len(j.Metadata) > 0 {
		parent = traceContext.Extract(ctx, propagation.MapCarrier(j.Metadata))
	}
	attrs := []attribute.KeyValue{attrSystem, attrOpSend, attrDestination.String(j.Queue), attrKind.String(j.Kind)}
	if j.ID != "" {
		attrs = append(attrs, attrMessageID.String(j.ID))
	}
	sctx, span := b.tracer.Start(parent, "enqueue "+j.Queue,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	j.Metadata = WithTraceContext(sctx, j.Metadata)
	return span
}

// WithTraceContext is md, or, when ctx holds a valid span, a copy of md
// with that span's W3C trace context (traceparent, tracestate) in place of
// any it had: an older context must not survive beside the new one, and
// Inject writes no tracestate when the span has none. The caller's map is
// never changed. Enqueue writes its producer span this way, and the outbox
// the context of the request that wrote a row.
func WithTraceContext(ctx context.Context, md map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return md
	}
	out := make(map[string]string, len(md)+2)
	maps.Copy(out, md)
	delete(out, "traceparent")
	delete(out, "tracestate")
	traceContext.Inject(ctx, propagation.MapCarrier(out))
	if ts, ok := out["tracestate"]; ok {
		if ts = fitTracestate(ts); ts == "" {
			delete(out, "tracestate")
		} else {
			out["tracestate"] = ts
		}
	}
	return out
}

// fitTracestate is ts within tracestateMaxBytes: list members dropped from
// the right, as W3C trace context says a system that cannot carry them all
// does.
func fitTracestate(ts string) string {
	for len(ts) > tracestateMaxBytes {
		i := strings.LastIndexByte(ts, ',')
		if i < 0 {
			return ""
		}
		ts = ts[:i]
	}
	return ts
}

// TraceContextOf is the span context that md carries (as WithTraceContext
// wrote it), or an invalid one when it carries none.
func TraceContextOf(md map[string]string) trace.SpanContext {
	if len(md) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.MapCarrier(md)))
}

// endEnqueue ends an enqueue's producer span with its answer: the job's id
// (the holder's when its unique key was held) and its error.
func endEnqueue(span trace.Span, e Enqueued) {
	if e.ID != "" {
		span.SetAttributes(attrMessageID.String(e.ID))
	}
	var dup *DuplicateError
	switch {
	case e.Err == nil:
	case errors.Is(e.Err, ErrUniqueHeld):
		span.SetAttributes(attrEnqueueUnique) // deduplicated by design: not a failure
	case errors.As(e.Err, &dup):
		span.SetAttributes(attrEnqueueDup) // a re-sent enqueue meets its own job here
	default:
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End()
}

// endEnqueues ends EnqueueMany's producer spans, each with its job's
// answer; spans is nil when the broker does not trace.
func endEnqueues(spans []trace.Span, out []Enqueued) {
	for i, span := range spans {
		endEnqueue(span, out[i])
	}
}
