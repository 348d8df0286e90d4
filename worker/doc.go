// Package worker runs handlers on jobs from Redis: a Pool claims jobs into
// free slots, keeps their leases alive with one batched heartbeat, settles
// what each handler returns, recovers orphaned jobs with a bounded reaper
// on a loop of its own, and shuts down gracefully by releasing what it
// still holds. Each background loop is a service with one lifecycle
// (dispatcher, maintenance, heartbeat, acker, scheduler, relay), which
// Start starts and Shutdown stops in order.
//
// The common call, in a service that handles its own signals:
//
//	pool, err := worker.New(b, mux, worker.Config{
//		Queues:      []worker.Queue{{Name: "emails"}},
//		Concurrency: 10,
//	})
//	err = pool.Run(ctx) // until ctx ends; then a graceful Shutdown
//
// or Start, then Shutdown(ctx) with a deadline for the running handlers.
//
// The pool never builds a Redis key, runs a script or holds a Redis client
// itself: every Redis operation goes through the broker package — the
// scripts, the idle wait for a wake-up (broker.Leases.WaitForWork), the
// startup checks (CheckServer, QueueMemory) — and so does the decision
// which errors are worth retrying (broker.IsTransient).
//
// What the pool guarantees, on top of the broker's invariants:
//
//   - Recovery while running (invariant 5). The maintenance loop reaps
//     expired leases of its queues at most every max(lease/3, poll
//     interval), in batches of Config.ReapBatch, apart from the claims; a
//     pool busy with continuous ready work still reaps on schedule. An orphaned job is
//     claimable again within lease + that interval, with no restart.
//   - Handlers stop when the lease is gone (invariant 7). The heartbeat
//     renews all held leases every lease/3 in one round trip. A lost lease
//     or a cancel request cancels that handler's context at once, with
//     handlers.ErrLeaseLost or handlers.ErrJobCancelled as its cause. When
//     Redis cannot be reached it keeps retrying until the lease's deadline,
//     measured on the local monotonic clock from when the claim or last
//     renew was sent, then cancels with handlers.ErrLeaseExpired.
//     One lease's trouble (a settlement retried past its deadline, a queue
//     whose node is down) never stops the renewal of the others.
//   - A Redis outage stalls the pool; it never crashes it or drops a job.
//     Claims and settlements retry transient errors with backoff; a job
//     whose settlement never got through keeps its lease until it expires
//     and the reaper of some pool recovers it.
//   - A lost reply costs nothing (invariant 9). A claim whose answer did
//     not arrive — on its own, or sent with a batch of acks to fill the
//     slots they free — is sent again under the same request id, for up
//     to a lease, and answers the leases it took; a settlement sent again
//     answers what the first did, so it is not logged as stale — unless it
//     comes after the re-send horizon (broker.ResendHorizon, 5 s) and
//     retention has deleted the job it settled meanwhile: that one is
//     counted and logged as stale, though its first send was stored.
//   - A job of a kind the handler has no handler for is not failed
//     (Config.UnknownKind): it is given back without charging an attempt
//     (broker.Leases.GiveBack), to wait for a pool that has the kind — in a
//     rolling deploy, the old pools leave the new kinds alone. Its wait is
//     the job's, whichever pools gave it back: 5s, then three times as
//     long as it has waited so far (15s, 1m, 4m) up to 5m, so a pool with
//     only such jobs claims each a few times an hour, not in a loop. Only
//     a job no handler ran is given back (handlers.NoHandler). After 24h of waiting it is dead,
//     with an error that names the kind. The pool warns once a minute per
//     kind, and counts give-backs as Stats.GivenBack, not as failures.
//   - Dependents of finished jobs are settled by claims and by the
//     reaper's upkeep in bounded steps (invariant 8); the upkeep runs
//     again at once while any are left.
//
// Delivery is at least once: a handler can run again after a crash or a
// lost lease, so handlers must be idempotent.
package worker
