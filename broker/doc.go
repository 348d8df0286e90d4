// Package broker is fenceq's Redis data model: key names, one Go method per
// atomic Lua operation (scripts/lua), and typed results. It owns no
// goroutines and holds no policy: when to claim, renew, retry or reap is the
// worker package's business.
//
// # Data model
//
// Every key of a queue carries the hash tag {queue}, so each script touches a
// single Redis Cluster slot and no script touches two queues:
//
//	<prefix>:{<queue>}:job:<id>   HASH  one job: kind, payload, state, attempt,
//	                                    max_attempts, gen, token, lease_until, ...
//	<prefix>:{<queue>}:blocked    ZSET  jobs waiting for the jobs they depend on
//	<prefix>:{<queue>}:ready      ZSET  pending jobs, by priority then FIFO
//	<prefix>:{<queue>}:scheduled  ZSET  delayed jobs and retries, by run_at
//	<prefix>:{<queue>}:leases     ZSET  running jobs, by lease_until
//	<prefix>:{<queue>}:dead       ZSET  dead jobs, by finished_at
//	<prefix>:{<queue>}:done       ZSET  done jobs, by finished_at
//	<prefix>:{<queue>}:cancelled  ZSET  cancelled jobs, by finished_at
//	<prefix>:{<queue>}:wake       LIST  wake-up token for blocked workers
//	<prefix>:{<queue>}:seq        STRING FIFO sequence of ready
//	<prefix>:{<queue>}:paused, :limits, :starts, :events, :unique:<key>,
//	  :children:<id>, :waiting:<id>, :finished:<id>
//	                                    flow control, events, unique keys,
//	                                    dependents and Wait's wake-ups
//	<prefix>:queues               SET   every queue this prefix has seen
//
// All times inside the scripts come from the Redis server's TIME. A worker
// never compares its clock with Redis or with another worker; it measures
// durations on its own monotonic clock (see [Lease.LocalDeadline]).
//
// # Invariants
//
// These hold for every sequence of operations, from any number of workers,
// and the tests check each one on miniredis and on a real Redis server.
//
//  1. One valid claim. A claim (id, gen, token) is valid iff the job hash
//     holds state=running with that gen and that token. At most one claim
//     per job is valid at any time: every claim installs a fresh token.
//  2. Fencing. Renew, Progress, Ack, Fail, Snooze and Release change nothing
//     unless their claim is valid; otherwise they answer [Stale]. A stale
//     worker can never overwrite the work of the claim that replaced it.
//  3. Monotonic generation. gen strictly increases with every claim,
//     release, release_unowned and reap of a job. Handlers receive (id, gen)
//     as a fencing token for external systems. The token guards the case gen
//     alone cannot: a job deleted and enqueued again under the same id starts
//     again at gen 0, but never with the same token.
//  4. Expiry is a recovery clock, not a revocation. A lease past its
//     lease_until that no reaper has taken still belongs to its token: its
//     owner may renew or settle it. Once Reap or ReleaseUnowned has taken it,
//     the old token is dead.
//  5. Recovery while running. Reap recovers a bounded batch of expired
//     leases on any call, from any live process; no restart is needed. (The
//     worker package calls it at its loop head.)
//  6. Nothing lost. Every job id is in exactly the index that matches its
//     state. [Broker.Check] verifies it on a live Redis. A script that meets
//     an index entry whose hash disagrees refiles it, and a hash holding
//     garbage is marked dead with the reason, never dropped.
//
// Delivery is at least once: a handler may run again after a crash, so
// handlers must be idempotent. Fencing guarantees that the queue's own state
// never takes a stale result.
package broker
