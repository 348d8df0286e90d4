package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fenceq/fenceq/outbox"
)

// Relayer moves jobs into Redis from elsewhere, e.g. an *outbox.Relay
// (transactional enqueue from SQL). A pool with Config.Outbox runs it.
type Relayer interface {
	RelayOnce(ctx context.Context) (int, error)
}

// relay runs the outbox relay until the pool stops: again at once while it
// finds rows, else after the poll interval. Each row set aside for good is
// warned about once, unthrottled: it will not come back by itself.
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
		var refused *outbox.RefusedError
		if errors.As(err, &refused) {
			for _, row := range refused.Rows {
				p.log.Warn("fenceq outbox row refused; moved aside", slog.String("table", refused.Table),
					slog.String("queue", row.Queue), slog.String("id", row.ID), slog.String("reason", row.Reason))
			}
			n, err = n+len(refused.Rows), refused.Err
		}
		if err != nil && ctx.Err() == nil && errs.ok() {
			p.log.Warn("fenceq outbox relay failed; retrying", slog.Any("error", err))
		}
		if err == nil && n > 0 {
			continue
		}
		p.sleep(p.cfg.PollInterval, p.stop)
	}
}
