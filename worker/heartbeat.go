package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/middleware"
)

// heartbeat is the service that keeps the pool's leases: every lease/3 it
// renews every lease the pool holds in one round trip, and cancels the
// handler of a lease Redis says is lost or whose job was cancelled. After a
// failed round it retries sooner, backing off. Cancelling a handler whose
// lease ran out is the watchdog's job (see run), so a renew stuck in Redis
// delays nothing.
type heartbeat struct {
	loop
	heartbeatParams
	renewErrors *throttle
}

// renewer is what the heartbeat asks of broker.Leases.
type renewer interface {
	Renew(ctx context.Context, leases []broker.Lease, lease time.Duration) ([]broker.Renewal, error)
}

// heartbeatParams is what the heartbeat uses.
type heartbeatParams struct {
	log     *slog.Logger
	lease   time.Duration                                   // Config.LeaseDuration
	onRenew func(took time.Duration, leases int, err error) // Config.OnRenew; nil: none
	broker  renewer
	held    *heldJobs // the leases to renew
	stats   *stats    // leasesLost
	health  *redisHealth
}

func newHeartbeat(parent context.Context, params heartbeatParams) *heartbeat {
	return &heartbeat{loop: loopUnder(parent), heartbeatParams: params, renewErrors: newThrottle(10 * time.Second)}
}

func (h *heartbeat) start() { h.run(h.beat) }

// beat is the loop: one renew round per interval.
func (h *heartbeat) beat() {
	interval := h.lease / 3
	retry := 20 * time.Millisecond
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
		next := interval
		if h.renew(interval) {
			retry = 20 * time.Millisecond
		} else {
			next, retry = min(retry, interval), min(retry*2, interval)
		}
		t.Reset(next)
	}
}

// renew runs one heartbeat round; it reports whether Redis answered.
func (h *heartbeat) renew(interval time.Duration) bool {
	var held []*active
	for _, a := range h.held.snapshot() {
		if gone(a) {
			continue
		}
		held = append(held, a)
	}
	if len(held) == 0 {
		return true
	}
	leases := make([]broker.Lease, len(held))
	for i, a := range held {
		leases[i] = a.lease
	}
	// The round is bounded by the next one, not by any lease's deadline: a
	// lease at or past its deadline (one whose ack is retried through its
	// node's outage, say) would cut the round short for every other lease.
	// Its watchdog takes care of it.
	ctx, cancel := context.WithTimeout(context.Background(), interval)
	began := time.Now()
	rs, err := h.broker.Renew(ctx, leases, h.lease)
	cancel()
	if h.onRenew != nil {
		h.onRenew(time.Since(began), len(leases), err)
	}
	for i, a := range held {
		r := broker.Renewal{Err: err}
		if i < len(rs) {
			r = rs[i]
		}
		switch {
		case r.Err != nil:
			expire(a, r.Err, h.log, h.stats)
		case r.Outcome == broker.Stale && a.settling.Load():
		case r.Outcome == broker.Stale:
			h.stats.leasesLost.Add(1)
			h.log.Warn("fenceq lease lost: another claim replaced this one; cancelling the handler", middleware.JobAttrs(a.job))
			if a.span != nil {
				a.span.AddEvent(eventLeaseLost)
			}
			a.cancel(handlers.ErrLeaseLost)
		case r.Outcome == broker.CancelRequested:
			a.extend(r.LocalDeadline)
			if a.ctx.Err() == nil {
				h.log.Info("fenceq job cancelled; cancelling the handler", middleware.JobAttrs(a.job))
				if a.span != nil {
					a.span.AddEvent(eventCancelRequested)
				}
			}
			a.cancel(handlers.ErrJobCancelled)
		default:
			a.extend(r.LocalDeadline)
		}
	}
	switch {
	case err == nil:
		h.health.answered()
	case broker.IsTransient(err):
		h.health.failed("renew", err) // the leases' deadlines say when a handler stops
	case h.renewErrors.ok():
		h.log.Warn("fenceq could not renew leases; retrying until their deadlines", slog.Int("leases", len(held)), slog.Any("error", err))
	}
	return err == nil
}

// expire cancels a's handler with ErrLeaseExpired once its local deadline
// has passed; it reports whether it has. The heartbeat calls it for a
// lease it could not renew, the watchdog (adopt) at the deadline.
func expire(a *active, err error, log *slog.Logger, st *stats) bool {
	if time.Now().Before(a.deadline()) {
		return false
	}
	if !gone(a) && !a.settling.Load() {
		st.leasesLost.Add(1)
		log.Warn("fenceq lease expired: it could not be renewed in time; cancelling the handler",
			middleware.JobAttrs(a.job), slog.Any("error", err))
		if a.span != nil {
			a.span.AddEvent(eventLeaseExpired)
		}
		a.cancel(handlers.ErrLeaseExpired)
	}
	return true
}

// gone reports whether a's lease is no longer the pool's to renew.
func gone(a *active) bool {
	c := context.Cause(a.ctx)
	return errors.Is(c, handlers.ErrLeaseLost) || errors.Is(c, handlers.ErrLeaseExpired)
}
