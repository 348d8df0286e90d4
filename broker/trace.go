package broker

import (
	"context"
	"errors"
	"maps"

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
func (b *Broker) traceEnqueue(ctx context.Context, j *Job) trace.Span {
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
	md := make(map[string]string, len(j.Metadata)+2)
	maps.Copy(md, j.Metadata)
	// An older context (the outbox's) must not survive beside the new one:
	// Inject writes no tracestate when the span has none.
	delete(md, "traceparent")
	delete(md, "tracestate")
	traceContext.Inject(sctx, propagation.MapCarrier(md))
	j.Metadata = md
	return span
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
