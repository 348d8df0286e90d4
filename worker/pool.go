package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
type Pool struct {
	b        *broker.Broker
	cfg      Config
	log      *slog.Logger
	handler  handlers.Handler
	wakeFrom []string // the queues an idle pool waits on (broker.WaitForWork)

	mu     sync.Mutex
	active map[*active]struct{}
	closed bool // set by Shutdown: start runs no more handlers

	slots     chan struct{} // one token per running handler
	slotFreed chan struct{} // nudges the dispatcher when a slot frees

	started      atomic.Bool
	stopped      atomic.Bool
	stop         chan struct{} // closed: claim no more
	jobsCtx      context.Context
	killJobs     context.CancelCauseFunc // cancels every handler (ErrShutdown)
	halt         chan struct{}           // closed: give up retrying Redis
	haltOnce     sync.Once
	handlers     sync.WaitGroup // one per running handler goroutine
	dispatchDone chan struct{}  // closed when the dispatcher has returned
	claimAbort   chan struct{}  // closed when Shutdown's ctx ends: stop asking for a lost claim
	hbStop       chan struct{}
	hbDone       chan struct{}
	acks         chan *ackReq            // successes for the acker to batch
	drained      map[string]*atomic.Bool // per queue: its last claim found too little ready
	trimStep     map[string]int          // per queue: the next trim's batch (dispatch goroutine only)
	trimMark     atomic.Int64            // jobs the pool had finished at its last trim
	trimBehind   bool                    // the last trim had a full batch (dispatch only)
	trimDue      chan struct{}           // nudges the dispatcher: ReapBatch jobs finished since the last trim
	scheds       []*schedule             // parsed Config.Periodic
	schedDone    chan struct{}           // closed when the scheduler has returned
	relayDone    chan struct{}           // closed when the outbox relay has returned
	ackerDone    chan struct{}           // closed when the acker has returned
	recovering   sync.WaitGroup          // claims sent with acks whose answer is asked for again

	stats       stats
	renewErrors *throttle
}

// active is one job the pool holds.
type active struct {
	lease  broker.Lease
	job    *handlers.Job
	ctx    context.Context
	cancel context.CancelCauseFunc
	// settling is set when the handler has returned: a renew that finds
	// the lease gone after that has most likely met our own settlement,
	// which reports for itself if it was stale.
	settling atomic.Bool
	// passed is set when the acker gave this job's slot to a job it claimed
	// with the ack: the slot is not freed when this job ends.
	passed atomic.Bool

	mu            sync.Mutex
	localDeadline time.Time   // when the lease certainly stops being ours
	expiry        *time.Timer // fires at localDeadline: the watchdog
}

func (a *active) deadline() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.localDeadline
}

func (a *active) extend(d time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.localDeadline = d
	a.expiry.Reset(time.Until(d))
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
		b: b, cfg: cfg, log: cfg.Logger,
		handler:   middleware.Chain(append([]middleware.Middleware{middleware.Recover()}, cfg.Middleware...)...)(h),
		active:    map[*active]struct{}{},
		slots:     make(chan struct{}, cfg.Concurrency),
		slotFreed: make(chan struct{}, 1),
		stop:      make(chan struct{}),
		halt:      make(chan struct{}),
		hbStop:    make(chan struct{}),
		hbDone:    make(chan struct{}),
		acks:      make(chan *ackReq, cfg.Concurrency),
		ackerDone: make(chan struct{}),
		drained:   map[string]*atomic.Bool{},
		trimStep:  map[string]int{},
		trimDue:   make(chan struct{}, 1),

		dispatchDone: make(chan struct{}),
		claimAbort:   make(chan struct{}),

		renewErrors: newThrottle(10 * time.Second),
	}
	for _, q := range cfg.Queues {
		p.wakeFrom = append(p.wakeFrom, q.Name)
		p.drained[q.Name] = &atomic.Bool{}
	}
	for _, pc := range cfg.Periodic {
		s, err := parseSchedule(pc)
		if err != nil {
			return nil, &ConfigError{Field: "Periodic", Err: err}
		}
		if err := b.ValidateJob(pc.Job); err != nil {
			return nil, &ConfigError{Field: "Periodic", Reason: fmt.Sprintf("periodic %q", pc.Name), Err: err}
		}
		p.scheds = append(p.scheds, s)
	}
	p.schedDone = make(chan struct{})
	p.relayDone = make(chan struct{})
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
		return fmt.Errorf("%w; the Redis user needs EVAL, EVALSHA and SCRIPT", err)
	}
	p.checkMemory(ctx)
	go p.dispatch()
	go p.heartbeat()
	go p.acker()
	if len(p.scheds) > 0 {
		go p.scheduler(p.scheds)
	} else {
		close(p.schedDone)
	}
	if p.cfg.Outbox != nil {
		go p.relay(p.cfg.Outbox)
	} else {
		close(p.relayDone)
	}
	p.log.Info("fenceq pool started", slog.Any("queues", p.queueNames()),
		slog.Int("concurrency", p.cfg.Concurrency), slog.Duration("lease", p.cfg.LeaseDuration))
	return nil
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
func (p *Pool) Shutdown(ctx context.Context) error {
	if !p.started.Load() {
		return errors.New("fenceq: pool not started")
	}
	if !p.stopped.CompareAndSwap(false, true) {
		return errors.New("fenceq: pool already shut down")
	}
	close(p.stop)
	// Shutdown's deadline ends the asking for a lost claim's answer, in
	// the dispatcher and in the acker alike.
	stopAbort := context.AfterFunc(ctx, func() { close(p.claimAbort) })
	defer stopAbort()
	p.log.Info("fenceq pool shutting down", slog.Int("running", p.running()))
	grace := time.NewTimer(p.cfg.ShutdownTimeout)
	defer grace.Stop()

	// From here no handler starts (start checks closed under the same lock),
	// so waiting for the running ones cannot race with a new one.
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	drained := make(chan struct{})
	go func() { p.handlers.Wait(); close(drained) }()

	var err error
	select {
	case <-drained:
	case <-grace.C:
	case <-ctx.Done():
	}
	select {
	case <-drained:
	default:
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
			err = ctx.Err()
		}
	}
	p.haltOnce.Do(func() { close(p.halt) })
	close(p.hbStop)
	<-p.hbDone
	<-p.ackerDone
	// The dispatcher is one claim or one short blocking call away, unless
	// it — or a claim sent with acks (recoverClaim) — is asking Redis again
	// for a claim whose answer was lost: that lasts while Redis is
	// unreachable, up to a lease, or until ctx ends (claimAbort), so that
	// what the claim took is released, not charged an attempt by a reaper.
	claimsDone := make(chan struct{})
	go func() {
		<-p.dispatchDone
		p.recovering.Wait()
		close(claimsDone)
	}()
	select {
	case <-claimsDone:
	case <-ctx.Done():
		<-claimsDone // claimAbort is closed: they return at once
		err = ctx.Err()
	}
	<-p.schedDone
	<-p.relayDone
	p.log.Info("fenceq pool stopped", slog.Int64("succeeded", p.stats.succeeded.Load()), slog.Int64("claimed", p.stats.claimed.Load()))
	return err
}

// abandon releases the leases of handlers that did not return after their
// context was cancelled: in time (an error: the handler ignores it), or
// before Shutdown's ctx ended (a warning: the caller chose not to wait).
// Their own settlement, if it ever comes, is stale.
func (p *Pool) abandon(level slog.Level, why string) {
	for _, a := range p.snapshot() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		o, _, err := p.b.Release(ctx, a.lease)
		cancel()
		p.log.Log(context.Background(), level, why, middleware.JobAttrs(a.job), slog.String("release", o.String()), slog.Any("error", err))
	}
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

// halted reports whether the pool has given up on Redis (end of Shutdown).
func (p *Pool) halted() bool {
	select {
	case <-p.halt:
		return true
	default:
		return false
	}
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
