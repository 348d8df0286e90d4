package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fenceq/fenceq/broker"
)

// tracesFlushTimeout bounds how long workerd waits, on exit, for the spans
// still batched to reach the collector: a collector that is down must not
// hold up a stop.
const tracesFlushTimeout = 5 * time.Second

// startTracing builds the tracer provider that `run` and `enqueue` give
// their broker, when the standard OpenTelemetry variables ask for one:
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set,
// OTEL_SDK_DISABLED not "true", OTEL_TRACES_EXPORTER unset, "otlp" or
// "none" (off). Spans go in batches to an OTLP/HTTP exporter, which reads
// the rest of OTEL_EXPORTER_OTLP_* itself (headers, timeout, certificates,
// compression); the resource comes from OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, with service.name "workerd" when neither names
// it. It answers nil when tracing is off. Call stopTracing on exit.
func startTracing(ctx context.Context, e *env, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	endpoint := e.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		if base := e.getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); base != "" {
			endpoint = strings.TrimSuffix(base, "/") + "/v1/traces" // the exporter's rule for the shared variable
		}
	}
	if endpoint == "" || strings.EqualFold(e.getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	switch exporter := e.getenv("OTEL_TRACES_EXPORTER"); exporter {
	case "", "otlp":
	case "none":
		return nil, nil
	default:
		return nil, &configError{fmt.Errorf("OTEL_TRACES_EXPORTER=%s: workerd exports traces only over OTLP; unset it (or set otlp), or set none to turn tracing off", exporter)}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		p := e.getenv(name)
		if p == "" {
			continue
		}
		if p != "http/protobuf" {
			return nil, &configError{fmt.Errorf("%s=%s: workerd exports traces over OTLP/HTTP with protobuf only (no grpc, no http/json); set %s=http/protobuf or unset it, and point the endpoint at the collector's OTLP/HTTP port (4318 by default, not gRPC's 4317)", name, p, name)}
		}
		break // the traces variable, when set, overrides the shared one
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, &configError{fmt.Errorf("OTLP trace exporter: %w; check the OTEL_EXPORTER_OTLP_* variables", err)}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "workerd")), // overridden by the variables below
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		// A malformed OTEL_RESOURCE_ATTRIBUTES: keep what could be read.
		log.Warn("workerd: could not read every OpenTelemetry resource attribute", slog.Any("error", err))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("workerd exports traces over OTLP/HTTP", slog.String("endpoint", endpoint))
	return tp, nil
}

// connectTraced is rf.connect with the tracer provider the OTEL_*
// variables ask for (startTracing), for a command without a logger of its
// own (enqueue): tracing's messages go to standard error. Call stop on
// exit: it flushes the spans.
func connectTraced(ctx context.Context, e *env, rf *redisFlags) (b *broker.Broker, stop func(), err error) {
	log, err := (&logFlags{format: "auto", level: "info"}).logger(e.stderr)
	if err != nil {
		return nil, nil, err
	}
	if rf.tracing, err = startTracing(ctx, e, log); err != nil {
		return nil, nil, err
	}
	stop = func() { stopTracing(rf.tracing, log) }
	if _, b, err = rf.connect(ctx, e); err != nil {
		stop()
		return nil, nil, err
	}
	return b, stop, nil
}

// benchTracing is `workerd bench --trace`'s provider: every span sampled
// and batched as in production, then dropped, so that what bench measures
// is the cost of tracing to fenceq, not an exporter's or a collector's.
func benchTracing() *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(dropSpans{}))
}

// dropSpans is a span exporter that drops what it is given.
type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }

// stopTracing flushes the spans still batched, for at most
// tracesFlushTimeout, and stops the provider; nil is off.
func stopTracing(tp *sdktrace.TracerProvider, log *slog.Logger) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracesFlushTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("workerd could not flush its last spans to the OTLP endpoint", slog.Any("error", err))
	}
}
