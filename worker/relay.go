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
	relayParams
}

// relayParams is what the relay uses.
type relayParams struct {
	log          *slog.Logger
	pollInterval time.Duration
	relayer      Relayer // Config.Outbox; nil: the relay has nothing to run
}

func newRelay(parent context.Context, params relayParams) *relay {
	return &relay{loop: loopUnder(parent), relayParams: params}
}

func (rl *relay) start() {
	if rl.relayer != nil {
		rl.run(rl.relay)
	}
}

// relay is the loop: again at once while it finds rows, else after the
// poll interval, until it is stopped. Each row set aside for good is
// warned about once, unthrottled: it will not come back by itself.
func (rl *relay) relay() {
	errs := newThrottle(10 * time.Second)
	ctx := rl.ctx
	for !rl.stopping() {
		n, err := rl.relayer.RelayOnce(ctx)
		var refused *outbox.RefusedError
		if errors.As(err, &refused) {
			for _, row := range refused.Rows {
				rl.log.Warn("fenceq outbox row refused; moved aside", slog.String("table", refused.Table),
					slog.String("queue", row.Queue), slog.String("id", row.ID), slog.String("reason", row.Reason))
			}
			n, err = n+len(refused.Rows), refused.Err
		}
		if err != nil && ctx.Err() == nil && errs.ok() {
			rl.log.Warn("fenceq outbox relay failed; retrying", slog.Any("error", err))
		}
		if err == nil && n > 0 {
			continue
		}
		sleep(rl.pollInterval, rl.ctx.Done())
	}
}
