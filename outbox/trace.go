package outbox

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// withTraceContext is md, or, when ctx holds a valid span, a copy of md
// with that span's W3C trace context (traceparent, tracestate) in place of
// any there. The row keeps it, and the relay's broker.Enqueue parents its
// producer span on it, so the job joins the trace of the request that
// wrote the row, not of the relay round that moved it.
func withTraceContext(ctx context.Context, md map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return md
	}
	out := make(map[string]string, len(md)+2)
	maps.Copy(out, md)
	delete(out, "traceparent")
	delete(out, "tracestate")
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(out))
	return out
}
