package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// retry runs op until it succeeds or fails for a reason retrying cannot fix,
// backing off on transient Redis errors (broker.IsTransient). It gives up
// only when the pool halts at the end of Shutdown.
func (p *Pool) retry(what string, attrs slog.Attr, op func(context.Context) error) error {
	delay := 20 * time.Millisecond
	logged := newThrottle(10 * time.Second)
	for {
		err := op(context.Background())
		if err == nil || !broker.IsTransient(err) || errors.Is(err, errHalted) {
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
