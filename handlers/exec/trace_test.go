//go:build unix

package exec_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/jobrow"
)

// spanContext is a sampled span context with a tracestate, made by hand.
func spanContext(t *testing.T) trace.SpanContext {
	t.Helper()
	ts, err := trace.ParseTraceState("vendor=v1")
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
	})
}

// The command gets the trace context of the span in its job's context as
// TRACEPARENT and TRACESTATE, replacing any the worker inherited; without
// a span, it gets none of ours.
func TestExecTraceContextEnv(t *testing.T) {
	t.Setenv("TRACESTATE", "inherited=1")
	h := mustExec(t, shell(`printf '%s|%s' "$TRACEPARENT" "$TRACESTATE"`))
	ctx := trace.ContextWithSpanContext(context.Background(), spanContext(t))
	job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "j", Queue: "q", Kind: "k"}})
	if err := h.ProcessJob(ctx, job); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	if got, want := string(job.Result()), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01|vendor=v1"; got != want {
		t.Errorf("trace context seen by the command = %q, want %q", got, want)
	}

	job = handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "j", Queue: "q", Kind: "k"}})
	if err := h.ProcessJob(context.Background(), job); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	if got, want := string(job.Result()), "|inherited=1"; got != want {
		t.Errorf("with no span the command saw %q, want %q (only the worker's own environment)", got, want)
	}
}
