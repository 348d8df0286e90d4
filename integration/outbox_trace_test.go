package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/outbox"
)

// A job written to the outbox under a request's span joins that request's
// trace once relayed: the relay's producer span is the request span's
// child (the row kept its context), not a root of the relay's own, and the
// job carries the producer's context to its worker. The caller's metadata
// map is left as it was.
func TestOutboxKeepsTraceContext(t *testing.T) {
	t.Parallel()
	db := postgres(t)
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	table := fmt.Sprintf("fenceq_outbox_test_%d", time.Now().UnixNano())
	if err := outbox.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE IF EXISTS "` + table + `"`) })

	reqCtx, req := tp.Tracer("test").Start(ctx, "request")
	mine := map[string]string{"tenant": "acme"}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := outbox.Enqueue(reqCtx, tx, b.Client(), table, broker.Job{Queue: "ob", Kind: "k", Metadata: mine})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	req.End()
	if len(mine) != 1 {
		t.Fatalf("the caller's metadata was changed: %v", mine)
	}

	r := newRelay(t, db, b, table, 0)
	if n, err := r.RelayOnce(ctx); err != nil || n != 1 { // the relay's own ctx holds no span
		t.Fatalf("RelayOnce = %d, %v; want 1 job", n, err)
	}
	var producer sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindProducer {
			producer = s
		}
	}
	if producer == nil {
		t.Fatal("the relay's enqueue started no producer span")
	}
	if producer.SpanContext().TraceID() != req.SpanContext().TraceID() || producer.Parent().SpanID() != req.SpanContext().SpanID() {
		t.Fatalf("producer span in trace %v under %v; want the request's trace %v under the request span %v",
			producer.SpanContext().TraceID(), producer.Parent().SpanID(), req.SpanContext().TraceID(), req.SpanContext().SpanID())
	}

	res, err := b.Leases().Claim(ctx, "ob", 1, time.Minute)
	if err != nil || len(res.Leases) != 1 || res.Leases[0].ID != id {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	md := res.Leases[0].Metadata
	got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(md)))
	if got.SpanID() != producer.SpanContext().SpanID() || md["tenant"] != "acme" {
		t.Fatalf("the job carries %v (span %v); want the producer span %v and the caller's keys", md, got.SpanID(), producer.SpanContext().SpanID())
	}
}
