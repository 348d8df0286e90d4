package worker

import (
	"context"
	"log/slog"
	"time"
)

// Relayer moves jobs into Redis from elsewhere, e.g. an *outbox.Relay
// (transactional enqueue from SQL). A pool with Config.Outbox runs it.
type Relayer interface {
	RelayOnce(ctx context.Context) (int, error)
}

// relay runs the outbox relay until the pool stops: again at once while it
// finds rows, else after the poll interval.
func (p *Pool) relay(r Relayer) {
	defer close(p.relayDone)
	errs := newThrottle(10 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-p.stop
		cancel()
	}()
	for !p.stopping() {
		n, err := r.RelayOnce(ctx)
		if err != nil && ctx.Err() == nil && errs.ok() {
			p.log.Warn("fenceq outbox relay failed; retrying", slog.Any("error", err))
		}
		if err == nil && n > 0 {
			continue
		}
		p.sleep(p.cfg.PollInterval, p.stop)
	}
}
