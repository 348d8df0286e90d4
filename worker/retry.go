package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// retry runs op until it succeeds or fails for a reason retrying cannot fix,
// backing off on transient Redis errors. It gives up only when the pool
// halts at the end of Shutdown.
func (p *Pool) retry(what string, attrs slog.Attr, op func(context.Context) error) error {
	delay := 20 * time.Millisecond
	logged := newThrottle(10 * time.Second)
	for {
		err := op(context.Background())
		if err == nil || !transient(err) || errors.Is(err, errHalted) {
			return err
		}
		if logged.ok() {
			p.log.Warn("fenceq: Redis unavailable; retrying", slog.String("op", what), attrs, slog.Any("error", err))
		}
		if !p.sleep(delay, nil) {
			return fmt.Errorf("pool stopped while retrying: %w", err)
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// transient reports whether err is one that goes away by itself: the
// network, a timeout, an exhausted connection pool, or a server that is
// loading, failing over or read-only for now.
func transient(err error) bool {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.As(err, &ne):
		return true
	}
	for _, prefix := range []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY", "NOREPLICAS", "UNBLOCKED"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// throttle lets a repeated log line through at most once per period.
type throttle struct {
	mu     sync.Mutex
	period time.Duration
	last   time.Time
}

func newThrottle(period time.Duration) *throttle { return &throttle{period: period} }

func (t *throttle) ok() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.last.IsZero() && time.Since(t.last) < t.period {
		return false
	}
	t.last = time.Now()
	return true
}
