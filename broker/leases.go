package broker

// Leases is the lease protocol a worker uses: claim jobs, renew their
// leases, settle them (ack, fail, snooze, give back, release), the fused
// calls that settle and claim in one round trip, waiting for work, the
// reap and trim sweeps, and the pool's entry in the live worker registry
// (RegisterWorker). worker.Pool is built on it; it is public for users
// writing their own worker. Reach it as Broker.Leases; it shares the
// Broker's connection and is safe for concurrent use.
type Leases struct{ *core }
