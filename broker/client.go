package broker

import "go.opentelemetry.io/otel/trace"

// Client is what a producer needs: Enqueue, EnqueueMany, EnqueueArgs,
// ValidateJob and Wait. Reach it as Broker.Client; it shares the Broker's
// connection and is safe for concurrent use. A Batcher (NewBatcher) and
// the outbox (package outbox) enqueue through one.
type Client struct{ *core }

// TracerProvider is Options.TracerProvider: nil when the broker does not
// trace. The outbox asks it whether a row should keep the caller's trace
// context.
func (b *Client) TracerProvider() trace.TracerProvider { return b.opts.TracerProvider }
