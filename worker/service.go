package worker

import (
	"context"
	"sync"
	"time"
)

// service is one background loop of a pool: the dispatcher, maintenance,
// the heartbeat, the acker, the scheduler and the relay. Each owns its
// goroutine, the signal that ends it and the channel that says it has
// ended; Start starts them and Shutdown stops them in order. A service is
// built from a params struct that holds what it uses (the logger, config
// values, small interfaces of the broker methods it calls, the pool state
// it shares), never the Pool itself (TestServicesHoldNoPool).
//
// Asking a service to stop and waiting for it are two steps because
// Shutdown needs them apart: the dispatcher stops claiming first of all,
// but is waited for last, since it may be asking Redis again for a claim
// whose answer was lost while the handlers have their grace.
type service interface {
	// start runs the loop in a goroutine of its own. Call it once.
	start()
	// stop asks the loop to end and returns at once. It may be called
	// again, and before start.
	stop()
	// wait returns when the loop has ended: at once when it was never
	// started.
	wait()
}

// loop is the lifecycle every service embeds: the service's context, which
// stop cancels, and its done channel. The service's own calls to Redis (a
// reap, a trim, a wait for work) run on ctx. go-redis does not end a read
// when ctx is cancelled, so maintenance leaves a reap or trim behind when
// stopped (detached); a wait for work blocks a second at most.
type loop struct {
	ctx     context.Context
	cancel  context.CancelFunc // stop
	done    chan struct{}      // closed when the goroutine has returned
	runOnce sync.Once
}

// newLoop is a loop that only its own stop ends.
func newLoop() loop { return loopUnder(context.Background()) }

// loopUnder is a loop that its own stop ends, and the end of parent: the
// pool's stop signals (see signals) stop its services in groups.
func loopUnder(parent context.Context) loop {
	ctx, cancel := context.WithCancel(parent)
	return loop{ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// run starts body in the loop's goroutine; the loop has ended when body
// returns.
func (l *loop) run(body func()) {
	l.runOnce.Do(func() {
		go func() {
			defer close(l.done)
			body()
		}()
	})
}

func (l *loop) stop() { l.cancel() }

// wait returns when the goroutine has returned. A loop that never ran has
// nothing to wait for: stop marks it ended.
func (l *loop) wait() {
	select {
	case <-l.ctx.Done():
		l.runOnce.Do(func() { close(l.done) }) // never started: nothing runs
	default:
	}
	<-l.done
}

// stopping reports whether the loop has been asked to stop.
func (l *loop) stopping() bool {
	select {
	case <-l.ctx.Done():
		return true
	default:
		return false
	}
}

// sleep waits d, or less when done is closed; it reports whether it slept
// the whole time.
func sleep(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
