package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/version"
)

// registry is the service that keeps the pool's entry in the live worker
// registry (broker.WorkerRegistration): written at Start, refreshed every
// Config.RegistryInterval with the jobs the pool runs, removed at
// Shutdown. A refresh is a constant number of commands per pool, none per
// job; its list of jobs comes from the pool's memory. A refresh that fails
// is logged once, and once more when one succeeds again: an outage stops
// nothing and fills no log.
type registry struct {
	loop
	registryParams
	failing bool          // the last refresh failed; only the loop's goroutine (or Start, before it) touches it
	now     chan struct{} // a refresh wanted now (the pool is stopping)
}

// registrar is what the registry asks of broker.WorkerRegistration.
type registrar interface {
	Refresh(ctx context.Context, running []broker.RunningJob) error
	SetStopping()
	Remove(ctx context.Context) error
}

// registryParams is what the registry uses.
type registryParams struct {
	log      *slog.Logger
	interval time.Duration // Config.RegistryInterval
	lease    time.Duration // Config.LeaseDuration: a claim's time is its first deadline less this
	entry    registrar
	held     *heldJobs // the jobs the entry lists
	health   *redisHealth
}

func newRegistry(params registryParams) *registry {
	return &registry{loop: newLoop(), registryParams: params, now: make(chan struct{}, 1)}
}

// stopping marks the entry as the entry of a pool that is shutting down
// and has the loop write it at once, without waiting for it: Shutdown's
// first step.
func (r *registry) stopping() {
	r.entry.SetStopping()
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// newRegistration prepares the pool's entry: a new id at every start.
func newRegistration(l *broker.Leases, cfg Config, queues []string) (*broker.WorkerRegistration, error) {
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return l.RegisterWorker(broker.WorkerInfo{
		ID: hex.EncodeToString(id[:]), Name: cfg.Name, Host: host, PID: os.Getpid(),
		Version: version.String(), Queues: queues, Concurrency: cfg.Concurrency,
	}, cfg.registryTTL())
}

func (r *registry) start() { r.run(r.beat) }

func (r *registry) beat() {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
			r.refresh(r.ctx)
		case <-r.now:
			r.refresh(r.ctx)
		}
	}
}

// refresh writes the entry once, bounded by the interval.
func (r *registry) refresh(parent context.Context) {
	if r.loop.stopping() {
		return // Shutdown came first: it removes the entry, and nothing may write it again
	}
	ctx, cancel := context.WithTimeout(parent, r.interval)
	defer cancel()
	err := r.entry.Refresh(ctx, r.running())
	if err == nil {
		r.health.answered()
	}
	switch {
	case err != nil && parent.Err() != nil:
		// Stopping: the next step removes the entry anyway.
	case err != nil && broker.IsTransient(err):
		// An outage: the pool's one line says so, not this service.
		r.health.failed("refresh the worker registry", err)
	case err != nil && !r.failing:
		r.failing = true
		r.log.Warn("fenceq could not refresh this pool's entry in the worker registry; the pool runs on and tries again every interval",
			slog.Duration("interval", r.interval), slog.Any("error", err))
	case err == nil && r.failing:
		r.failing = false
		r.log.Info("fenceq refreshed this pool's entry in the worker registry again")
	}
}

// running lists the jobs the pool holds, from memory.
func (r *registry) running() []broker.RunningJob {
	held := r.held.snapshot()
	out := make([]broker.RunningJob, 0, len(held))
	for _, a := range held {
		l := a.lease
		out = append(out, broker.RunningJob{Queue: l.Queue, ID: l.ID, Generation: l.Generation, Since: l.Deadline.Add(-r.lease)})
	}
	return out
}

// remove deletes the entry, within a second: an entry left behind (Redis
// unreachable) expires with its TTL.
func (r *registry) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.entry.Remove(ctx); err != nil {
		r.log.Warn("fenceq could not remove this pool's entry from the worker registry; it expires by itself",
			slog.Any("error", err))
	}
}
