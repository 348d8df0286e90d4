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

// retrier retries Redis calls through transient errors until the pool
// halts (signals.halt).
type retrier struct {
	log    *slog.Logger
	halt   <-chan struct{}
	health *redisHealth // the pool's: an outage logs there once, not per call
}

// retry runs op until it succeeds or fails for a reason retrying cannot fix,
// backing off on transient Redis errors (broker.IsTransient). It gives up
// only when the pool halts at the end of Shutdown. attrs says what op is
// about in its warning; it is called only when one is logged, so that an
// op that succeeds at once (every settlement, nearly) builds nothing.
// op runs on context.Background(): a settlement cut short by a cancelled
// context would leave its outcome unknown, and halt ends the retries.
func (r retrier) retry(what string, attrs func() slog.Attr, op func(context.Context) error) error {
	delay := 20 * time.Millisecond
	var logged *throttle // made at the first transient error
	for {
		err := op(context.Background())
		if err == nil {
			r.health.answered()
		}
		if err == nil || !broker.IsTransient(err) || errors.Is(err, errHalted) {
			return err
		}
		r.health.failed(what, err)
		if logged == nil {
			logged = newThrottle(10 * time.Second)
		}
		if logged.ok() && r.log.Enabled(context.Background(), slog.LevelDebug) {
			r.log.Debug("fenceq: Redis unavailable; retrying", slog.String("op", what), attrs(), slog.Any("error", err))
		}
		if !sleep(delay, r.halt) {
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

// kindThrottle lets the warning about a kind the handler lacks through
// once per kindLogPeriod per kind, so a backlog of such jobs logs a line
// per kind, not per job. It counts the lines it held back, and keeps at
// most kindsKept kinds: a flood of new kinds, beyond those it keeps, is
// logged by the ones it has room for. Its zero value is ready.
type kindThrottle struct {
	mu    sync.Mutex
	kinds map[string]*kindSeen
}

type kindSeen struct {
	last time.Time
	held int
}

const (
	kindLogPeriod = time.Minute
	kindsKept     = 256
)

// ok says whether the line for kind may be logged now, and how many were
// held back since the last one.
func (k *kindThrottle) ok(kind string) (held int, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	seen := k.kinds[kind]
	if seen == nil {
		if k.kinds == nil {
			k.kinds = map[string]*kindSeen{}
		}
		if len(k.kinds) >= kindsKept {
			for name, s := range k.kinds {
				if now.Sub(s.last) >= kindLogPeriod {
					delete(k.kinds, name)
				}
			}
			if len(k.kinds) >= kindsKept {
				return 0, false
			}
		}
		k.kinds[kind] = &kindSeen{last: now}
		return 0, true
	}
	if now.Sub(seen.last) < kindLogPeriod {
		seen.held++
		return 0, false
	}
	held, seen.last, seen.held = seen.held, now, 0
	return held, true
}
