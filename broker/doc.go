// Package broker is fenceq's Redis data model and the API over it: every
// job operation is one Lua script (scripts/lua), called by one Go method
// with a typed result.
//
// [New] returns a [Broker], one connection to one Redis deployment. Each
// audience reaches it through its own view, which shares that connection:
//
//	b, err := broker.New(rdb, broker.Options{})
//
//	// Producers: Enqueue, EnqueueMany, EnqueueArgs, ValidateJob, Wait.
//	id, err := b.Client().Enqueue(ctx, broker.Job{Queue: "emails", Kind: "welcome", Payload: body})
//
//	// Operators and dashboards: counts, listings, events, cancel, retry,
//	// pause, limits, check.
//	n, err := b.Inspector().Counts(ctx, "emails")
//
//	// The lease protocol, for a worker of your own (worker.Pool uses it):
//	// claim, renew, settle, reap.
//	res, err := b.Leases().Claim(ctx, "emails", 10, 30*time.Second)
//
// Most programs need only the first: a worker.Pool takes the *Broker and
// drives the lease protocol itself.
//
// # Typed jobs
//
// A Go producer defines a type for a job's arguments that names its kind
// once ([Args]); the payload is the value's JSON:
//
//	type WelcomeArgs struct {
//		To string `json:"to"`
//	}
//
//	func (WelcomeArgs) Kind() string { return "welcome" }
//
//	id, err := b.Client().EnqueueArgs(ctx, WelcomeArgs{To: "ada@example.com"}, nil)
//
// and the worker registers its handler by the same type, so neither side
// spells the kind again:
//
//	handlers.Register(mux, func(ctx context.Context, job *handlers.Job, args WelcomeArgs) error { … })
//
// A type may hold default options ([ArgsWithOptions]: queue, attempts, a
// unique key computed from the value); the caller's [EnqueueOptions] are
// laid over them. [JobFor] builds the same [Job] for [Client.EnqueueMany],
// a [Batcher] or an outbox.
//
// The untyped form, a [Job] with a Kind and a Payload of bytes passed to
// [Client.Enqueue], stays for exec and http handlers and for producers in
// other languages: a job is its kind and payload, however it was made.
//
// # The broker
//
// The broker holds key names, one Go method per atomic Lua operation
// (scripts/lua), and typed results. A Broker owns no
// goroutines and holds no policy: when to claim, renew, retry or reap is the
// worker package's business. The one exception is opt-in: a [Batcher],
// which lets concurrent producers share round trips, runs one goroutine
// while it has jobs to send.
//
// The broker is the only package that talks to Redis. Besides the scripts,
// it sends the few plain commands a worker needs: the bounded blocking wait
// for a wake-up ([Leases.WaitForWork]), the server checks at startup
// ([Broker.CheckServer], [Inspector.ServerMemory], [Inspector.QueueMemory]), and
// it says which errors go away by themselves ([IsTransient]). It does not
// hand out its client.
//
// # Data model
//
// Every key of a queue carries the hash tag {queue}, so each script touches a
// single Redis Cluster slot and no script touches two queues. A queue's keys
// are "<prefix>:{<queue>}:<name>" and a job's "<prefix>:{<queue>}:<kind>:<id>"
// (the job hash is kind "job"); <prefix>:queues is the SET of every queue the
// prefix has seen. The one list of names, with what each key holds, is in
// broker/keys.go, which also writes the Lua that names them (docs/architecture.md,
// "Keys and replies").
//
// Every one of them is bounded by default; docs/operations.md gives each
// bound.
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
//
//  2. Fencing. Renew, Progress, Ack, Fail, Snooze, GiveBack and Release
//     change nothing unless their claim is valid; otherwise they answer
//     [Stale]. A stale worker can never overwrite the work of the claim
//     that replaced it.
//
//  3. Monotonic generation. gen strictly increases with every claim,
//     release, release_unowned, reap and retry of a job. Handlers receive
//     (id, gen) as a fencing token for external systems.
//
//  4. Expiry is a recovery clock, not a revocation. A lease past its
//     lease_until that no reaper has taken still belongs to its token: its
//     owner may renew or settle it. Once Reap or ReleaseUnowned has taken it,
//     the old token is dead.
//
//  5. Recovery while running. Reap recovers a bounded batch of expired
//     leases on any call, from any live process; no restart is needed. (A
//     worker pool calls it from a maintenance loop of its own, whatever its
//     claims are doing.)
//
//  6. Nothing lost. Every job id is in exactly the index that matches its
//     state. [Inspector.Check] verifies it on a live Redis. A script that meets
//     an index entry whose hash disagrees refiles it, and a hash holding
//     garbage is marked dead with the reason, never dropped.
//
//  7. (The worker package's: a handler stops when its lease is gone.)
//
//  8. Bounded scripts. No script's work grows with anything but the batch
//     its caller passes (ids, acks, leases, a limit) plus a fixed budget:
//     no scan of a whole index, no recursion. A finished job hands its
//     dependents to the queue's cascade in O(1); they are released or
//     cancelled at most 50 per settling script and per Claim, and Reap
//     settles up to its limit ([ReapResult.CascadeLeft] says when more
//     wait). A unique key is freed and Wait callers are woken in O(1).
//     An operation that takes a count (RetryDead, Reap, Trim, Leases,
//     ExpiredLeases) steps itself, at most 100 jobs per script call,
//     whatever count its caller gives; Purge steps itself at most
//     [PurgeStep] jobs per call, and a job deleted with 100,000 dependents
//     hands them to the cascade in O(1), as a finished one does. A step goes on just after the
//     entry the one before read last, never from a rank kept since, so
//     entries that leave meanwhile hide none that stayed; RetryDead reads
//     no further than the newest death its first step saw, so it sends
//     each job at most once.
//
//  9. Safe to re-send. A client that lost a reply may send the same request
//     again: Claim under the same request id ([Leases.ClaimRequest])
//     answers the same leases; Ack, Fail, Snooze, GiveBack and Release
//     answer the outcome their claim's settlement recorded (the job keeps the claim's
//     token and the outcome, and the records of its last three claims'
//     settlements once it is claimed again, so a re-send may come after
//     up to three later claims); Enqueue recognises its own request and
//     answers its job, not a duplicate; Retry, Cancel, Promote, Delete and
//     each step of Purge answer as the first call did (Delete from a
//     record kept for [ResendHorizon], so a re-send never deletes a job
//     enqueued under the id since). None changes anything the second time, so a lost
//     reply never costs a job an attempt and never makes a stored result
//     look stale. The broker sends these again itself while a reply is
//     lost (a timeout, a connection reset; never after an error reply),
//     a few times within the caller's context, so its caller sees no
//     failure for work Redis did; when no reply comes back, the error is
//     an [OutcomeUnknownError] (errors.Is [ErrOutcomeUnknown]) naming the
//     request to ask about. Every transient error of such a request
//     (IsTransient: a refused dial or an exhausted pool too, as the client
//     may have sent it before and retried) is taken as a lost reply, and
//     IsTransient holds for every OutcomeUnknownError. A claim that took
//     nothing leaves that answer under its request id as well, so a send
//     of it that reaches Redis after its re-send takes nothing. All this
//     holds within the re-send horizon ([ResendHorizon], 5 s from the first
//     send), after which the broker starts no re-send: retention deletes no
//     job that finished within it, and a claim's empty answer lasts
//     min(lease, horizon). A re-send later than that (the caller's own) of
//     a settlement whose job has since been trimmed answers Stale.
//
//  10. Fencing tokens grow across id reuse. Every generation is drawn from
//     a counter per queue, so it is greater than every generation ever
//     issued in the queue, also after a job was trimmed and its id
//     enqueued again: a fence that keeps the highest generation per job id
//     (UPDATE … WHERE fence < $gen) is right for every job that ever had
//     that id. The claim token still tells two claims apart whatever their
//     generations.
//
//  11. A group's slots are its valid leases. For every group, the queue's
//     running count of it (grunning) equals the number of its jobs whose
//     hash says running (each holds exactly one valid claim, invariant 1),
//     whenever a script ends. Only the claim raises it, in the script that
//     writes state=running; every branch that ends a lease (Ack, Fail,
//     Snooze, GiveBack, Release, ReleaseUnowned, Reap) lowers it in the
//     script that ends the lease, after reading state=running, so a re-send
//     frees nothing twice; cancel, retry and retention end no lease and
//     change no count. A group parked full goes back into the claims'
//     rotation in that same script. [Inspector.Check] verifies it.
//
// Delivery is at least once: a handler may run again after a crash, so
// handlers must be idempotent. Fencing guarantees that the queue's own state
// never takes a stale result.
//
// # Batches
//
// The operations on many items (EnqueueMany, AckMany, FusedAck, Renew)
// follow one rule. Each item gets its own answer, in the caller's order,
// read from its own status in the reply of its queue's script call: one
// item's refusal (stale, a duplicate id, a held unique key) never fails
// another. Only a script call that failed (Redis unreachable, a timeout, a
// reply of the wrong shape) leaves answers unknown, and then exactly its
// own items': where an item's answer has room for an error (Enqueued.Err,
// Renewal.Err) those items carry the call's error and the rest are
// answered; the returned error, where there is one, joins the failed
// calls' errors. AckMany and FusedAck, whose Outcome has no such room,
// answer no outcomes with an error; an ack is safe to send again.
package broker
