package broker

// Client is what a producer needs: Enqueue, EnqueueMany, EnqueueArgs,
// ValidateJob and Wait. Reach it as Broker.Client; it shares the Broker's
// connection and is safe for concurrent use.
type Client struct{ *core }
