package worker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fenceq/fenceq/broker"
)

// The consumer span's attributes: OpenTelemetry's messaging conventions
// (written out, to depend on no semconv package version) and fenceq's own.
var (
	attrSystem      = attribute.String("messaging.system", "fenceq")
	attrOpProcess   = attribute.String("messaging.operation.type", "process")
	attrDestination = attribute.Key("messaging.destination.name")
	attrMessageID   = attribute.Key("messaging.message.id")
	attrKind        = attribute.Key("fenceq.job.kind")
	attrAttempt     = attribute.Key("fenceq.job.attempt")
	attrGeneration  = attribute.Key("fenceq.job.generation")
	attrOutcome     = attribute.Key("fenceq.job.outcome")
)

// The lease events an attempt's span records when they happen.
const (
	eventLeaseLost       = "lease lost"       // another claim replaced ours (renew or progress found it stale)
	eventLeaseExpired    = "lease expired"    // no renewal reached Redis before the local deadline
	eventCancelRequested = "cancel requested" // the job was cancelled while it ran
	eventStaleSettlement = "stale settlement" // the settlement found the claim replaced: nothing stored
)

// newTracer is the pool's tracer: nil, so that no attempt is traced, when
// the broker has no tracer provider.
func newTracer(b *broker.Broker) trace.Tracer {
	if tp := b.TracerProvider(); tp != nil {
		return tp.Tracer(broker.TracerScope)
	}
	return nil
}

// startAttempt starts the span of one attempt of l's job, `process
// <queue>`, in ctx (the handler's, so the handler's own spans nest in it).
// Its parent is the producer span whose context Enqueue wrote into the
// job's metadata, so a job's whole life is one trace; it links to it too,
// as OpenTelemetry's messaging conventions ask of a consumer. A job with no
// trace context starts a trace of its own.
func (p *Pool) startAttempt(ctx context.Context, l broker.Lease) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrSystem, attrOpProcess, attrDestination.String(l.Queue), attrMessageID.String(l.ID),
			attrKind.String(l.Kind), attrAttempt.Int(l.Attempt), attrGeneration.Int64(l.Generation)),
	}
	// W3C trace context, as Enqueue wrote it (broker.Options.TracerProvider).
	if producer := broker.TraceContextOf(l.Metadata); producer.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, producer)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
	}
	return p.tracer.Start(ctx, "process "+l.Queue, opts...)
}

// endAttempt ends an attempt's span once its settlement's answer is known:
// o is what the handler's run came to, herr what it returned, res and st
// the settlement's answer, err the error that kept it from being sent.
func endAttempt(span trace.Span, o outcome, herr error, res broker.Outcome, st broker.State, err error) {
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, "settle: "+err.Error())
	case o == outcomeLeaseLost:
		span.SetAttributes(attrOutcome.String("lease lost"))
	case res == broker.Stale:
		span.AddEvent(eventStaleSettlement)
		span.SetAttributes(attrOutcome.String("stale"))
	default:
		label := outcomeLabel(o, st)
		span.SetAttributes(attrOutcome.String(label))
		if (label == "retry" || label == "dead") && herr != nil {
			span.RecordError(herr)
			span.SetStatus(codes.Error, herr.Error())
		}
	}
	span.End()
}

// outcomeLabel names a settled attempt's outcome on its span: done, retry,
// dead, snoozed, cancelled (a failure whose job's cancel was requested),
// released (given back on shutdown or at the lease's local deadline,
// uncharged) or given back (no handler for its kind, uncharged).
func outcomeLabel(o outcome, st broker.State) string {
	switch o {
	case outcomeDone:
		return "done"
	case outcomeSnooze:
		return "snoozed"
	case outcomeInterrupted, outcomeNotRun:
		return "released"
	case outcomeUnhandled:
		if st == broker.StateScheduled {
			return "given back"
		}
	}
	switch st { // a failure: what the fail script made of it
	case broker.StateDead:
		return "dead"
	case broker.StateCancelled:
		return "cancelled"
	}
	return "retry"
}
