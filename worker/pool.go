package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/middleware"
)

// abandonAfter is how long Shutdown waits for a handler that ignores its
// cancelled context before releasing its lease without it. A variable only
// so that tests can shorten it.
var abandonAfter = 5 * time.Second

// Pool runs handlers on jobs claimed from its queues. Start it once; stop it
// with Shutdown (or use Run).
//
// The pool holds what its services share: the slots, the jobs running in
// them, and the signals of its shutdown. Each background loop is a service
// of its own (see service), built from what it uses.
type Pool struct {
	b       *broker.Broker
	cfg     Config
	log     *slog.Logger
	handler handlers.Handler
	tracer  trace.Tracer // nil: attempts are not traced (broker.Options.TracerProvider)

	held    *heldJobs // the jobs running in the slots; the gate Shutdown closes
	slots   *slots
	sig     signals
	retries retrier

	// started and stopped refuse a second Start or Shutdown; they signal
	// nothing to the services.
	started atomic.Bool
	stopped atomic.Bool

	dispatcher  *dispatcher
	maintenance *maintenance
	heartbeat   *heartbeat
	acker       *acker
	scheduler   *scheduler
	relay       *relay
	registry    *registry // nil: Config.RegistryInterval is NoRegistry

	stats        stats
	unknownKinds kindThrottle // the warning of each kind the handler lacks
}

// signals are the pool's stop signals, made together in New and ended by
// Shutdown alone, each at its step (see Shutdown).
type signals struct {
	// intake ends at step 1: the dispatcher, maintenance, the scheduler
	// and the relay run under it.
	intake     context.Context
	stopIntake context.CancelFunc
	// jobs is every handler's parent context; step 2 cancels it with
	// handlers.ErrShutdown once the grace has passed.
	jobs     context.Context
	killJobs context.CancelCauseFunc
	// halt ends at step 3: retries of Redis errors give up. The heartbeat
	// and the acker run under it, so it stops them too (step 4).
	halt    context.Context
	haltNow context.CancelFunc
	// abort ends when Shutdown's ctx does: asking again for a lost claim's
	// answer, and giving back a job claimed while stopping, give up.
	abort    context.Context
	abortNow context.CancelFunc
}

func newSignals() signals {
	var s signals
	s.intake, s.stopIntake = context.WithCancel(context.Background())
	s.jobs, s.killJobs = context.WithCancelCause(context.Background())
	s.halt, s.haltNow = context.WithCancel(context.Background())
	s.abort, s.abortNow = context.WithCancel(context.Background())
	return s
}

// New returns a Pool that runs h (usually a *handlers.Mux) on jobs from b.
// It checks cfg and does not contact Redis; Start does.
func New(b *broker.Broker, h handlers.Handler, cfg Config) (*Pool, error) {
	if b == nil || h == nil {
		return nil, errors.New("fenceq: worker.New needs a broker and a handler")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Pool{
		b: b, cfg: cfg, log: cfg.Logger, tracer: newTracer(b),
		handler: middleware.Chain(append([]middleware.Middleware{middleware.Recover()}, cfg.Middleware...)...)(h),
		held:    newHeldJobs(),
		slots:   newSlots(cfg.Concurrency),
		sig:     newSignals(),
	}
	health := newRedisHealth(p.log)
	p.retries = retrier{log: p.log, halt: p.sig.halt.Done(), health: health}
	var err error
	if p.scheduler, err = newScheduler(p.sig.intake, schedulerParams{
		log: p.log, periodic: cfg.Periodic, poll: cfg.SchedulePoll, client: b.Client(),
		store: b.Schedules(), retries: p.retries,
	}); err != nil {
		return nil, err
	}
	p.dispatcher = newDispatcher(p.sig.intake, dispatcherParams{
		log: p.log, queues: cfg.Queues, strictPriority: cfg.StrictPriority,
		pollInterval: cfg.PollInterval, lease: cfg.LeaseDuration,
		broker: b.Leases(), slots: p.slots, jobs: p, abort: p.sig.abort.Done(), health: health,
	})
	p.maintenance = newMaintenance(p.sig.intake, maintenanceParams{
		log: p.log, queues: p.queueNames(), reapBatch: cfg.ReapBatch,
		reapInterval: cfg.reapInterval(), retention: cfg.trimRetention(),
		broker: b.Leases(), stats: &p.stats, health: health,
	})
	p.heartbeat = newHeartbeat(p.sig.halt, heartbeatParams{
		log: p.log, lease: cfg.LeaseDuration, onRenew: cfg.OnRenew,
		broker: b.Leases(), held: p.held, stats: &p.stats, health: health,
	})
	p.acker = newAcker(p.sig.halt, ackerParams{
		concurrency: cfg.Concurrency, broker: b.Leases(), claims: p.dispatcher,
		held: p.held, slots: p.slots, jobs: p,
	})
	p.relay = newRelay(p.sig.intake, relayParams{log: p.log, pollInterval: cfg.PollInterval, relayer: cfg.Outbox})
	if cfg.RegistryInterval != NoRegistry {
		entry, err := newRegistration(b.Leases(), cfg, p.queueNames())
		if err != nil {
			return nil, err
		}
		p.registry = newRegistry(registryParams{
			log: p.log, interval: cfg.RegistryInterval, lease: cfg.LeaseDuration, entry: entry, held: p.held, health: health,
		})
	}
	return p, nil
}

// Start checks the Redis server (reachable, recent enough, running the
// scripts for this user, and warns when its eviction policy could drop
// jobs or its maxmemory is unset or too small for retention), then starts claiming. It returns at
// once; the pool runs until Shutdown.
func (p *Pool) Start(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return errors.New("fenceq: pool already started")
	}
	if err := checkServer(ctx, p.b, p.log); err != nil {
		p.started.Store(false) // nothing runs: Start may be tried again
		return err
	}
	if err := p.b.LoadScripts(ctx); err != nil {
		p.started.Store(false)
		return fmt.Errorf("%w; the Redis user needs FCALL and FUNCTION (Redis 7), or EVAL, EVALSHA and SCRIPT", err)
	}
	p.checkMemory(ctx)
	if p.stopped.Load() {
		// Shutdown came while the server was checked: its services were
		// stopped before they ran, and none will run now.
		return errors.New("fenceq: pool shut down while it was starting")
	}
	if p.registry != nil {
		// Written before the first claim, so that the pool is listed
		// from its start and no refresh lands among its first jobs.
		p.registry.refresh(ctx)
	}
	for _, s := range p.services() {
		s.start()
	}
	p.log.Info("fenceq pool started", slog.Any("queues", p.queueNames()),
		slog.Int("concurrency", p.cfg.Concurrency), slog.Duration("lease", p.cfg.LeaseDuration))
	return nil
}

// services lists the pool's services in the order Start starts them:
// those that look after running jobs (heartbeat, acker) before the one that
// brings them in (dispatcher), and the reaper before the first claim, so
// that what it recovers at start is claimed at once. None waits for
// another, so the order is for the reader; Shutdown's is not.
func (p *Pool) services() []service {
	s := []service{p.heartbeat, p.acker, p.maintenance, p.dispatcher, p.scheduler, p.relay}
	if p.registry != nil {
		s = append(s, p.registry)
	}
	return s
}

// Run starts the pool and shuts it down gracefully when ctx is done.
func (p *Pool) Run(ctx context.Context) error {
	if err := p.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), p.cfg.ShutdownTimeout+abandonAfter+5*time.Second)
	defer cancel()
	return p.Shutdown(sctx)
}

// Shutdown stops claiming, lets running handlers finish for up to
// Config.ShutdownTimeout, then cancels the rest (cause
// handlers.ErrShutdown) and releases their leases, so another pool takes
// their jobs at once without charging an attempt. A handler that ignores
// its cancelled context for 5 more seconds, or past ctx, is abandoned: its
// lease is released without it and its late result will be stale. Shutdown
// returns ctx's error when ctx ended first.
//
// It stops the services in this order, and each step says why:
//
//  1. The dispatcher, maintenance, the scheduler and the relay are asked
//     to stop (intake): the pool takes no new work. Its registry entry
//     is written again at once, marked stopping. A job claimed from
//     here on (a claim in flight, or sent with an ack) is given back
//     unrun. A reap or trim in flight is not waited for: it is safe to
//     cut short, and the client would hold it until its read timeout.
//  2. Running handlers get their grace, then are cancelled with
//     handlers.ErrShutdown, then abandoned (drainHandlers). The heartbeat
//     and the acker run all along: a handler that finishes in its grace
//     keeps its lease and has its success acked.
//  3. Retries of Redis end (halt): whatever settlement is still retrying
//     gives up, so nothing below waits on an outage.
//  4. The heartbeat and the acker, which run under halt, have stopped
//     with it and are waited for: no handler is left to renew or ack for.
//  5. The dispatcher, maintenance and the claims asked again for a lost
//     answer are waited for (waitClaims): a claim's answer, once it comes,
//     is given back rather than left to a reaper. Asking again ends with
//     ctx (abort); a claim already sent to a stalled server is waited for
//     up to the client's read timeout and retries, so on a stalled server
//     Shutdown may return that long after ctx.
//  6. The scheduler and the relay are waited for: each is at most one
//     tick or one relay round from its end.
//  7. The registry's refreshes stop and the pool's entry is removed
//     (within a second; an entry left behind expires): it is listed as
//     long as it holds jobs.
//
// The signals: what ends each, and who waits on it.
//
//   - intake: cancelled at step 1; the loops of dispatcher, maintenance, scheduler and relay, and execute.
//   - the held jobs' gate: closed at step 2; adopt and fusedBegin.
//   - jobs: cancelled after the grace, cause handlers.ErrShutdown; every handler's context.
//   - halt: cancelled at step 3; retry, ack, and the loops of heartbeat and acker.
//   - abort: cancelled when ctx ends; claimRequest and giveBack.
//   - a service's done: closed when its loop returns; Shutdown, steps 4 to 6.
//
// The slots' freed channel only nudges the dispatcher; it stops nothing.
func (p *Pool) Shutdown(ctx context.Context) error {
	if !p.started.Load() {
		return errors.New("fenceq: pool not started")
	}
	if !p.stopped.CompareAndSwap(false, true) {
		return errors.New("fenceq: pool already shut down")
	}
	// 1. No new work, and the registry says so.
	p.sig.stopIntake()
	if p.registry != nil {
		p.registry.stopping()
	}
	// Shutdown's deadline ends the asking for a lost claim's answer, in
	// the dispatcher and in the acker alike.
	stopAbort := context.AfterFunc(ctx, p.sig.abortNow)
	defer stopAbort()
	p.log.Info("fenceq pool shutting down", slog.Int("running", p.running()))

	// 2. The handlers: grace, cancel, abandon.
	err := p.drainHandlers(ctx)

	// 3 and 4. No more retries; nothing left to renew or ack.
	p.sig.haltNow()
	p.heartbeat.wait()
	p.acker.wait()

	// 5. The claims, whose answers are given back.
	if cerr := p.waitClaims(ctx); cerr != nil {
		err = cerr
	}

	// 6. The periodic ticks and the outbox.
	p.scheduler.wait()
	p.relay.wait()

	// 7. The pool runs nothing more: it leaves the worker registry.
	if p.registry != nil {
		p.registry.stop()
		p.registry.wait()
		p.registry.remove()
	}
	p.log.Info("fenceq pool stopped", slog.Int64("succeeded", p.stats.succeeded.Load()), slog.Int64("claimed", p.stats.claimed.Load()))
	return err
}

// drainHandlers lets the running handlers finish for up to
// Config.ShutdownTimeout, then cancels them with handlers.ErrShutdown (their
// settlement releases their jobs) and waits abandonAfter more, or until
// ctx ends, before it releases the leases of those still running without
// them. It answers ctx's error when ctx ended first.
func (p *Pool) drainHandlers(ctx context.Context) error {
	grace := time.NewTimer(p.cfg.ShutdownTimeout)
	defer grace.Stop()

	// From here no handler starts (adopt checks the gate under the same
	// lock), so waiting for the running ones cannot race with a new one.
	p.held.close()
	drained := make(chan struct{})
	go func() { p.held.handlers.Wait(); close(drained) }()

	select {
	case <-drained:
	case <-grace.C:
	case <-ctx.Done():
	}
	select {
	case <-drained:
		return nil
	default:
	}
	p.log.Warn("fenceq pool cancelling unfinished handlers; their jobs are released", slog.Int("running", p.running()))
	p.sig.killJobs(handlers.ErrShutdown)
	abandon := time.NewTimer(abandonAfter)
	defer abandon.Stop()
	select {
	case <-drained:
	case <-abandon.C:
		p.abandon(slog.LevelError, "fenceq abandoned a handler that ignored its cancelled context")
	case <-ctx.Done():
		p.abandon(slog.LevelWarn, "fenceq stopped waiting for a cancelled handler: shutdown's context ended")
		return ctx.Err()
	}
	return nil
}

// waitClaims waits for the dispatcher, maintenance and the claims the
// acker asks again for (recoverClaim). Each is one claim or one short
// blocking call away, unless it is asking Redis again for a claim whose
// answer was lost: that lasts while Redis is unreachable, up to a lease,
// or until ctx ends (abort), so that what the claim took is released,
// not charged an attempt by a reaper. It answers ctx's error when ctx
// ended first, and returns only when they all have.
func (p *Pool) waitClaims(ctx context.Context) error {
	claimsDone := make(chan struct{})
	go func() {
		p.dispatcher.wait()
		p.maintenance.wait()
		p.held.fused.Wait() // before recovering: a lost claim's asking is added first
		p.acker.recovering.Wait()
		close(claimsDone)
	}()
	select {
	case <-claimsDone:
		return nil
	case <-ctx.Done():
		<-claimsDone // abort has ended: they return at once
		return ctx.Err()
	}
}

// abandon releases the leases of handlers that did not return after their
// context was cancelled: in time (an error: the handler ignores it), or
// before Shutdown's ctx ended (a warning: the caller chose not to wait).
// Their own settlement, if it ever comes, is stale.
func (p *Pool) abandon(level slog.Level, why string) {
	for _, a := range p.held.snapshot() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := p.b.Leases().Release(ctx, a.lease)
		cancel()
		p.log.Log(context.Background(), level, why, middleware.JobAttrs(a.job), slog.String("release", s.Outcome.String()), slog.Any("error", err))
	}
}

func (p *Pool) queueNames() []string {
	names := make([]string, len(p.cfg.Queues))
	for i, q := range p.cfg.Queues {
		names[i] = q.Name
	}
	return names
}

func (p *Pool) running() int { return p.slots.running() }

// logProblems logs the jobs a script found misfiled or damaged.
func logProblems(log *slog.Logger, queue, op string, problems []broker.CorruptJobError) {
	for _, c := range problems {
		log.Error("fenceq found a misfiled or damaged job; the problem says what was done", slog.String("queue", queue),
			slog.String("op", op), slog.String("id", c.ID), slog.String("problem", c.Reason))
	}
}
