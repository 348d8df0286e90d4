package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
// The pool holds what its services share: the slots and the jobs running
// in them, and the signals of its shutdown. Each background loop is a
// service of its own (see service).
type Pool struct {
	b       *broker.Broker
	cfg     Config
	log     *slog.Logger
	handler handlers.Handler
	tracer  trace.Tracer // nil: attempts are not traced (broker.Options.TracerProvider)

	mu     sync.Mutex
	active map[*active]struct{}
	closed bool // set by Shutdown: run starts no more handlers

	// fused counts the settlements sent with a claim (acker.send,
	// fusedSettle), registered under mu while closed is unset: Shutdown
	// waits for them before the claims they leave to be asked for again
	// (waitClaims), also those a handler's own goroutine sends after
	// Shutdown stopped waiting for it (abandoned).
	fused sync.WaitGroup

	slots     chan struct{} // one token per running handler
	slotFreed chan struct{} // nudges the dispatcher when a slot frees
	handlers  sync.WaitGroup
	jobsCtx   context.Context
	killJobs  context.CancelCauseFunc // cancels every handler (ErrShutdown)

	started    atomic.Bool
	stopped    atomic.Bool
	halt       chan struct{} // closed: give up retrying Redis
	claimAbort chan struct{} // closed when Shutdown's ctx ends: stop asking for a lost claim

	dispatcher  *dispatcher
	maintenance *maintenance
	heartbeat   *heartbeat
	acker       *acker
	scheduler   *scheduler
	relay       *relay

	stats        stats
	unknownKinds kindThrottle // the warning of each kind the handler lacks
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
		handler:    middleware.Chain(append([]middleware.Middleware{middleware.Recover()}, cfg.Middleware...)...)(h),
		active:     map[*active]struct{}{},
		slots:      make(chan struct{}, cfg.Concurrency),
		slotFreed:  make(chan struct{}, 1),
		halt:       make(chan struct{}),
		claimAbort: make(chan struct{}),
	}
	p.dispatcher = newDispatcher(p)
	var err error
	if p.scheduler, err = newScheduler(p); err != nil {
		return nil, err
	}
	p.maintenance = newMaintenance(p)
	p.heartbeat = newHeartbeat(p)
	p.acker = newAcker(p)
	p.relay = newRelay(p, cfg.Outbox)
	p.jobsCtx, p.killJobs = context.WithCancelCause(context.Background())
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
	return []service{p.heartbeat, p.acker, p.maintenance, p.dispatcher, p.scheduler, p.relay}
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
//     to stop: the pool takes no new work. A job claimed from here on
//     (a claim in flight, or sent with an ack) is given back unrun.
//  2. Running handlers get their grace, then are cancelled with
//     handlers.ErrShutdown, then abandoned (drainHandlers). The heartbeat
//     and the acker run all along: a handler that finishes in its grace
//     keeps its lease and has its success acked.
//  3. Retries of Redis end (halt): whatever settlement is still retrying
//     gives up, so nothing below waits on an outage.
//  4. The heartbeat and the acker stop together: no handler is left to
//     renew or ack for.
//  5. The dispatcher, maintenance and the claims asked again for a lost
//     answer are waited for (waitClaims): a claim's answer, once it comes,
//     is given back rather than left to a reaper. Asking again ends with
//     ctx; a call already sent to a stalled server (a reap, a trim, a
//     claim) is waited for up to the client's read timeout and retries,
//     so on a stalled server Shutdown may return that long after ctx.
//  6. The scheduler and the relay are waited for last: each is at most
//     one tick or one relay round from its end.
func (p *Pool) Shutdown(ctx context.Context) error {
	if !p.started.Load() {
		return errors.New("fenceq: pool not started")
	}
	if !p.stopped.CompareAndSwap(false, true) {
		return errors.New("fenceq: pool already shut down")
	}
	// 1. No new work.
	p.dispatcher.stop()
	p.maintenance.stop()
	p.scheduler.stop()
	p.relay.stop()
	// Shutdown's deadline ends the asking for a lost claim's answer, in
	// the dispatcher and in the acker alike.
	stopAbort := context.AfterFunc(ctx, func() { close(p.claimAbort) })
	defer stopAbort()
	p.log.Info("fenceq pool shutting down", slog.Int("running", p.running()))

	// 2. The handlers: grace, cancel, abandon.
	err := p.drainHandlers(ctx)

	// 3. No more retries.
	close(p.halt)

	// 4. Nothing left to renew or ack.
	p.heartbeat.stop()
	p.acker.stop()
	p.heartbeat.wait()
	p.acker.wait()

	// 5. The claims, whose answers are given back.
	if cerr := p.waitClaims(ctx); cerr != nil {
		err = cerr
	}

	// 6. The periodic ticks and the outbox.
	p.scheduler.wait()
	p.relay.wait()
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

	// From here no handler starts (run checks closed under the same lock),
	// so waiting for the running ones cannot race with a new one.
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	drained := make(chan struct{})
	go func() { p.handlers.Wait(); close(drained) }()

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
	p.killJobs(handlers.ErrShutdown)
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
// or until ctx ends (claimAbort), so that what the claim took is
// released, not charged an attempt by a reaper. It answers ctx's error
// when ctx ended first, and returns only when they all have.
func (p *Pool) waitClaims(ctx context.Context) error {
	claimsDone := make(chan struct{})
	go func() {
		p.dispatcher.wait()
		p.maintenance.wait()
		p.fused.Wait() // before recovering: a lost claim's asking is added first
		p.acker.recovering.Wait()
		close(claimsDone)
	}()
	select {
	case <-claimsDone:
		return nil
	case <-ctx.Done():
		<-claimsDone // claimAbort is closed: they return at once
		return ctx.Err()
	}
}

// abandon releases the leases of handlers that did not return after their
// context was cancelled: in time (an error: the handler ignores it), or
// before Shutdown's ctx ended (a warning: the caller chose not to wait).
// Their own settlement, if it ever comes, is stale.
func (p *Pool) abandon(level slog.Level, why string) {
	for _, a := range p.snapshot() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := p.b.Leases().Release(ctx, a.lease)
		cancel()
		p.log.Log(context.Background(), level, why, middleware.JobAttrs(a.job), slog.String("release", s.Outcome.String()), slog.Any("error", err))
	}
}

// fusedBegin registers a fused call about to be sent, and reports whether
// it may be: not once Shutdown is past waiting for handlers, whose claims
// it would give back anyway. fused.Done ends it.
func (p *Pool) fusedBegin() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.fused.Add(1)
	return true
}

func (p *Pool) queueNames() []string {
	names := make([]string, len(p.cfg.Queues))
	for i, q := range p.cfg.Queues {
		names[i] = q.Name
	}
	return names
}

func (p *Pool) running() int { return len(p.slots) }

func (p *Pool) snapshot() []*active {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*active, 0, len(p.active))
	for a := range p.active {
		out = append(out, a)
	}
	return out
}

// sleep waits d, or less when the pool halts; it reports whether it slept
// the whole time.
func (p *Pool) sleep(d time.Duration, or <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.halt:
		return false
	case <-or:
		return false
	}
}

func (p *Pool) logProblems(queue, op string, problems []broker.CorruptJobError) {
	for _, c := range problems {
		p.log.Error("fenceq found a misfiled or damaged job; the problem says what was done", slog.String("queue", queue),
			slog.String("op", op), slog.String("id", c.ID), slog.String("problem", c.Reason))
	}
}
