package broker

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// A program that builds its provider only when tracing is configured
// (var tp *sdktrace.TracerProvider; if cfg.Trace { tp = … }) passes a nil
// *TracerProvider in the interface; workerd's own connect guards against
// exactly this. New must not crash on it: it either reads it as "not
// tracing" or refuses it with an error.
func TestNewWithATypedNilTracerProvider(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	var tp *sdktrace.TracerProvider
	var b *Broker
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("New with a nil *sdktrace.TracerProvider panicked: %v", p)
			}
		}()
		b, err = New(c, Options{TracerProvider: tp})
	}()
	if err != nil {
		return // refused with an error: fine
	}
	if _, err := b.Client().Enqueue(context.Background(), Job{Queue: "q", Kind: "k"}); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
}
