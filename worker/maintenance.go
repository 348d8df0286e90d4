package worker

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// trimStepsMax bounds how far a trim's batch grows while retention is
// behind, in ReapBatches: 1,000 jobs by default, a few milliseconds of
// Redis (invariant 8).
const trimStepsMax = 10

// trimAgainSlack is how long after broker.ResendHorizon the trim that
// follows up one after finishes runs: the jobs finished just before that
// one are then surely past the horizon (Redis's clock, not the pool's).
const trimAgainSlack = 100 * time.Millisecond

// maintenance is the service that keeps the pool's queues in shape: it
// recovers expired leases (the reaper), carries on the cascades of
// finished jobs' dependents, and trims finished jobs past their retention,
// each in bounded batches.
//
// It runs on its own loop, not behind claims: recovery keeps its schedule
// whatever the pool is doing, so ready work cannot starve it (invariant 5).
type maintenance struct {
	loop
	maintenanceParams

	trimStep   map[string]int // per queue: the next trim's batch
	trimBehind bool           // the last trim had a full batch
	trimMark   atomic.Int64   // jobs the pool had finished at its last trim
	trimDue    chan struct{}  // nudged when ReapBatch jobs finished since the last trim
	// trimAgain is when to trim once more after a trim that came after
	// the pool finished jobs: retention spares a job for
	// broker.ResendHorizon after it finished, so the jobs finished just
	// before that trim are deleted by this one. Zero: none due.
	trimAgain time.Time
}

// reaper is what maintenance asks of broker.Leases.
type reaper interface {
	Reap(ctx context.Context, queue string, limit int) (broker.ReapResult, error)
	Trim(ctx context.Context, queue string, r broker.Retention, limit int) (int, error)
}

// maintenanceParams is what maintenance uses.
type maintenanceParams struct {
	log          *slog.Logger
	queues       []string
	reapBatch    int              // Config.ReapBatch
	reapInterval time.Duration    // Config.reapInterval
	retention    broker.Retention // Config.trimRetention
	broker       reaper
	stats        *stats // reaped, counted; finished, read to pace the trims
	health       *redisHealth
}

func newMaintenance(parent context.Context, params maintenanceParams) *maintenance {
	return &maintenance{loop: loopUnder(parent), maintenanceParams: params, trimStep: map[string]int{}, trimDue: make(chan struct{}, 1)}
}

func (m *maintenance) start() { m.run(m.maintain) }

// maintain is the loop: reap at most every reapInterval, again at once
// while a batch comes back full or dependents are left, and trim whenever
// the pool has finished a ReapBatch of jobs since the last trim, and once
// more a re-send horizon after a trim that followed finishes (trimAgain).
func (m *maintenance) maintain() {
	var nextReap time.Time
	for !m.stopping() {
		if !time.Now().Before(nextReap) {
			nextReap = time.Now().Add(m.reapInterval)
			if m.reap() {
				nextReap = time.Now() // a full batch: more may be waiting
			}
		}
		// Retention keeps pace with the pool's own settlements, not only
		// with the reaper's clock: a busy pool finishes tens of thousands
		// of jobs between two reaps, which the index would hold past its
		// bound until then.
		again := !m.trimAgain.IsZero() && !time.Now().Before(m.trimAgain)
		if n := m.stats.finished(); n-m.trimMark.Load() >= int64(m.reapBatch) || m.trimBehind || again {
			m.trimAgain = time.Time{}
			if n != m.trimMark.Load() {
				m.trimAgain = time.Now().Add(broker.ResendHorizon + trimAgainSlack)
			}
			m.trimMark.Store(n)
			m.trimBehind = false
			for _, q := range m.queues {
				m.trimBehind = m.trim(q) || m.trimBehind
			}
		}
		if m.trimBehind {
			continue
		}
		wait := time.Until(nextReap)
		if !m.trimAgain.IsZero() {
			wait = min(wait, time.Until(m.trimAgain))
		}
		m.waitDue(wait)
	}
}

// finished tells maintenance the pool took a job to a final state; it
// nudges the loop when a trim is due.
func (m *maintenance) finished(n int64) {
	if n-m.trimMark.Load() >= int64(m.reapBatch) {
		select {
		case m.trimDue <- struct{}{}:
		default:
		}
	}
}

// waitDue blocks until a trim is due, maintenance stops, or d passes.
func (m *maintenance) waitDue(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-m.trimDue:
	case <-m.ctx.Done():
	case <-t.C:
	}
}

// reap recovers expired leases of every queue, one bounded batch each,
// settles a bounded step of the dependents of finished jobs, and trims
// finished jobs past their retention. It reports whether a batch was full
// or dependents are left, so more may be waiting.
func (m *maintenance) reap() (more bool) {
	for _, q := range m.queues {
		res, err := detached(m.ctx, func(ctx context.Context) (broker.ReapResult, error) {
			return m.broker.Reap(ctx, q, m.reapBatch)
		})
		if err != nil {
			if m.ctx.Err() != nil {
				return false // stopped
			}
			if broker.IsTransient(err) {
				m.health.failed("reap", err)
			} else {
				m.log.Warn("fenceq could not reap expired leases", slog.String("queue", q), slog.Any("error", err))
			}
			continue
		}
		m.health.answered()
		logProblems(m.log, q, "reap", res.Problems)
		for _, r := range res.Reaped {
			m.stats.reaped.Add(1)
			m.log.Warn("fenceq recovered a job whose lease expired (its worker is gone or stalled)",
				slog.String("queue", q), slog.String("id", r.ID), slog.String("now", string(r.State)), slog.Int64("generation", r.Generation))
		}
		more = more || len(res.Reaped) == m.reapBatch || res.CascadeLeft
		// Retention is upkeep of the same kind: bounded, on the same clock.
		more = m.trim(q) || more
	}
	return more
}

// trim deletes one batch of queue's finished jobs past retention, and
// reports whether the batch was full. Jobs finish as fast as the pool runs
// them, which can be far more than one ReapBatch per reap interval: a full
// batch doubles the next (up to trimStepsMax ReapBatches), so trimming
// catches up with any rate the pool reaches, and one that was not full
// falls back to ReapBatch.
func (m *maintenance) trim(queue string) (full bool) {
	step := max(m.trimStep[queue], m.reapBatch)
	trimmed, err := detached(m.ctx, func(ctx context.Context) (int, error) {
		return m.broker.Trim(ctx, queue, m.retention, step)
	})
	if err != nil {
		if m.ctx.Err() != nil {
			return false // stopped
		}
		if broker.IsTransient(err) {
			m.health.failed("trim", err)
		} else {
			m.log.Warn("fenceq could not trim finished jobs", slog.String("queue", queue), slog.Any("error", err))
		}
		return false
	}
	full = trimmed == step
	m.trimStep[queue] = m.reapBatch
	if full {
		m.trimStep[queue] = min(2*step, trimStepsMax*m.reapBatch)
	}
	return full
}

// detached runs call on ctx in a goroutine of its own, and answers its
// result, or ctx's error as soon as ctx ends. go-redis ends a read at its
// read timeout, not when the call's context is cancelled
// (TestRedisClientIgnoresCancelMidRead), so a stopped service would wait
// that long for a server that went silent. A reap or a trim is safe to
// leave: what it did is done, what it did not the next one does; its
// goroutine ends with the client's read timeout.
func detached[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	out := make(chan result, 1) // buffered: a call left behind never blocks
	go func() {
		v, err := call(ctx)
		out <- result{v, err}
	}()
	select {
	case r := <-out:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
