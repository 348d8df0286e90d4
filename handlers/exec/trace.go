package exec

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceEnv is the W3C trace context of the span in ctx as the command's
// environment: TRACEPARENT and TRACESTATE, upper case, as OpenTelemetry's
// specification for environment variables as carriers has it (a command
// that traces, through an SDK or a tool such as otel-cli, reads them to
// start its spans in the job's trace). Both are set, TRACESTATE empty when
// the span has none, so that values inherited from the worker's own
// environment never pass for the job's. Nothing when ctx holds no valid
// span.
func traceEnv(ctx context.Context) []string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return []string{"TRACEPARENT=" + c["traceparent"], "TRACESTATE=" + c["tracestate"]}
}
