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

// relay is the service that runs the pool's Relayer (Config.Outbox), when
// it has one.
type relay struct {
	loop
	p *Pool
	r Relayer
}

func newRelay(p *Pool, r Relayer) *relay { return &relay{loop: newLoop(), p: p, r: r} }

func (rl *relay) start() {
	if rl.r != nil {
		rl.run(rl.relay)
	}
}

// relay is the loop: again at once while it finds rows, else after the
// poll interval, until it is stopped. Each row set aside for good is
// warned about once, unthrottled: it will not come back by itself.
func (rl *relay) relay() {
	p := rl.p
	errs := newThrottle(10 * time.Second)
	ctx := rl.ctx
	for !rl.stopping() {
		n, err := rl.r.RelayOnce(ctx)
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
		p.sleep(p.cfg.PollInterval, rl.ctx.Done())
	}
}
