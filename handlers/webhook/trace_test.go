package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/webhook"
	"github.com/fenceq/fenceq/jobrow"
)

// The request carries the trace context of the span in the job's context
// as traceparent and tracestate; without a span, neither.
func TestHTTPTraceContextHeaders(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
	defer srv.Close()
	h := mustHTTP(t, webhook.Config{URL: srv.URL})

	ts, err := trace.ParseTraceState("vendor=v1")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	if err := h.ProcessJob(ctx, handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "j", Queue: "q", Kind: "k"}})); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	hdr := <-got
	if v, want := hdr.Get("traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; v != want {
		t.Errorf("traceparent = %q, want %q", v, want)
	}
	if v := hdr.Get("tracestate"); v != "vendor=v1" {
		t.Errorf("tracestate = %q, want vendor=v1", v)
	}

	if err := h.ProcessJob(context.Background(), handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "j", Queue: "q", Kind: "k"}})); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	if hdr := <-got; hdr.Get("traceparent") != "" || hdr.Get("tracestate") != "" {
		t.Errorf("with no span the request carried traceparent %q, tracestate %q", hdr.Get("traceparent"), hdr.Get("tracestate"))
	}
}

// A tracestate configured in cfg.Header (a static value, or one left from
// a copied request) must not travel beside the attempt's traceparent when
// the attempt's span has no tracestate of its own: the pair would describe
// two traces. exec's TRACESTATE and WithTraceContext's metadata both drop
// an older one; the webhook request keeps it.
func TestHTTPTraceContextReplacesConfiguredTracestate(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
	defer srv.Close()
	h := mustHTTP(t, webhook.Config{URL: srv.URL, Header: http.Header{"Tracestate": {"vendor=stale"}}})
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	if err := h.ProcessJob(ctx, handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "j", Queue: "q", Kind: "k"}})); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	hdr := <-got
	if v := hdr.Values("tracestate"); len(v) != 0 {
		t.Errorf("tracestate = %q beside traceparent %q; the span has none, want none", v, hdr.Get("traceparent"))
	}
}
