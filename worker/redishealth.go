package worker

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// redisHealth is what a pool knows of Redis being reachable, so that an
// outage logs one warning when it begins and one line when Redis answers
// again, not one per job, per claim or per heartbeat. Every service of the
// pool reports to the same one: a transient error (broker.IsTransient)
// with failed, any answer with answered. A nil one records nothing.
type redisHealth struct {
	log  *slog.Logger
	down atomic.Bool // read on every answer: the common case takes no lock

	mu      sync.Mutex
	since   time.Time // the first failure of the outage
	first   string    // what failed first
	retried int64     // failures since
}

func newRedisHealth(log *slog.Logger) *redisHealth { return &redisHealth{log: log} }

// failed records a transient Redis error of op; the first of an outage
// logs.
func (h *redisHealth) failed(op string, err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.retried++
	if h.down.Load() {
		return
	}
	h.down.Store(true)
	h.since, h.first, h.retried = time.Now(), op, 1
	h.log.Warn("fenceq: Redis unavailable: claims, settlements and renewals are retried until it answers; nothing is lost, running handlers keep their leases until their deadlines",
		slog.String("op", op), slog.Any("error", err))
}

// answered records that Redis answered; the first answer after an outage
// logs how long it lasted.
func (h *redisHealth) answered() {
	if h == nil || !h.down.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down.Load() {
		return
	}
	h.down.Store(false)
	h.log.Info("fenceq: Redis answers again", slog.Duration("unavailable_for", time.Since(h.since).Round(time.Millisecond)),
		slog.String("first_failed", h.first), slog.Int64("failed_calls", h.retried))
}
