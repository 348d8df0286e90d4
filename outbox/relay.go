package outbox

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// BatchDefault is how many rows a relay moves per round when
// RelayOptions.Batch is 0.
const BatchDefault = 500

// RelayOptions configures a Relay.
type RelayOptions struct {
	// Table is the outbox table, as given to CreateTable and Enqueue; ""
	// means TableDefault.
	Table string
	// Batch is how many rows one round reads at most (one EnqueueMany);
	// 0 means BatchDefault (500). It must not be negative.
	Batch int
}

func (o RelayOptions) withDefaults() RelayOptions {
	o.Table = cmp.Or(o.Table, TableDefault)
	o.Batch = cmp.Or(o.Batch, BatchDefault)
	return o
}

func (o RelayOptions) validate() error {
	if o.Batch < 0 {
		return fmt.Errorf("fenceq: outbox: RelayOptions.Batch is %d; it must be positive (0 means %d)", o.Batch, BatchDefault)
	}
	return nil
}

// Relay moves committed outbox rows to Redis. Make one with NewRelay; a
// pool relays it when given as worker.Config.Outbox.
type Relay struct {
	db   *sql.DB
	c    *broker.Client
	opts RelayOptions
}

// NewRelay answers a relay of the outbox table in db to Redis through c
// (Broker.Client), with opts' defaults applied.
func NewRelay(db *sql.DB, c *broker.Client, opts RelayOptions) (*Relay, error) {
	if db == nil || c == nil {
		return nil, errors.New("fenceq: outbox: NewRelay needs a database and a broker's Client")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Relay{db: db, c: c, opts: opts}, nil
}

// RelayOnce moves up to a batch of rows, oldest first, and answers how many
// jobs it enqueued. Duplicates (relayed before a crash) and jobs whose
// unique key another job holds are not counted, but their rows are
// deleted too: the job they describe is in Redis. Rows Redis refuses for
// good are moved to the refused table, and the error is then a
// *RefusedError listing them. A job whose dependency is an outbox row
// ahead of it waits for that row; one whose dependency reached Redis
// while the round ran is sent again, once. Other rows that fail are kept for the
// next round, and the error says why. Rows another relay holds are
// skipped.
func (r *Relay) RelayOnce(ctx context.Context) (int, error) {
	table := r.opts.Table
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("fenceq: outbox: begin: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT seq, id, queue, kind, payload, options FROM `+quote(table)+
		` ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`, r.opts.Batch)
	if err != nil {
		return 0, fmt.Errorf("fenceq: outbox: read rows: %w", err)
	}
	var (
		seqs    []int64
		jobs    []broker.Job
		refused []refusal
	)
	for rows.Next() {
		var seq int64
		var j broker.Job
		var opts []byte
		if err := rows.Scan(&seq, &j.ID, &j.Queue, &j.Kind, &j.Payload, &opts); err != nil {
			rows.Close()
			return 0, fmt.Errorf("fenceq: outbox: read row: %w", err)
		}
		if err := decodeOptions(opts, &j); err != nil {
			refused = append(refused, refusal{seq, fmt.Sprintf("unreadable options %s: %v", opts, err)})
			continue
		}
		seqs, jobs = append(seqs, seq), append(jobs, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("fenceq: outbox: read rows: %w", err)
	}
	if len(jobs)+len(refused) == 0 {
		return 0, nil
	}
	enqueued := 0
	var relayed []int64
	var errs []error
	for i, res := range r.c.EnqueueMany(ctx, jobs) {
		if dep, ok := missingDependency(res.Err); ok {
			ahead, err := dependencyAhead(ctx, tx, table, seqs[i], jobs[i].Queue, dep)
			if err != nil {
				errs = append(errs, fmt.Errorf("job %q: %w: looking for its dependency: %w", jobs[i].ID, res.Err, err))
				continue
			}
			if ahead {
				continue // kept for a later round, which finds its dependency in Redis
			}
			// A relay enqueues a row before it deletes it, so a dependency
			// no longer in the outbox may have reached Redis since the batch
			// was judged: the job is sent again, and refused only if it is
			// refused again.
			res.ID, res.Err = r.c.Enqueue(ctx, jobs[i])
		}
		switch {
		case res.Err == nil:
			enqueued++
			relayed = append(relayed, seqs[i])
		case errors.Is(res.Err, broker.ErrJobExists):
			relayed = append(relayed, seqs[i]) // relayed before a crash: done already
		case errors.Is(res.Err, broker.ErrUniqueHeld):
			relayed = append(relayed, seqs[i]) // deduplicated by the caller's own unique key
		case errors.Is(res.Err, broker.ErrInvalid):
			refused = append(refused, refusal{seqs[i], res.Err.Error()})
		default:
			errs = append(errs, fmt.Errorf("job %q: %w", jobs[i].ID, res.Err))
		}
	}
	if len(relayed) > 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+quote(table)+` WHERE seq = ANY($1)`, relayed); err != nil {
			return 0, fmt.Errorf("fenceq: outbox: delete relayed rows: %w", err)
		}
	}
	moved, err := moveRefused(ctx, tx, table, refused)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("fenceq: outbox: commit: %w", err)
	}
	if len(errs) > 0 {
		err = fmt.Errorf("fenceq: outbox: %d rows not relayed (kept for the next round): %w", len(errs), errors.Join(errs...))
	}
	if len(moved) > 0 {
		return enqueued, &RefusedError{Table: refusedTable(table), Rows: moved, Err: err}
	}
	return enqueued, err
}

// RunIntervalDefault is how often Run looks for rows when its interval is
// zero or negative.
const RunIntervalDefault = time.Second

// Run relays until ctx ends, at once while there are rows, then every
// interval (RunIntervalDefault when it is zero or negative, rather than a
// loop that never rests).
func (r *Relay) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = RunIntervalDefault
	}
	for {
		n, err := r.RelayOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var refused *RefusedError
		if errors.As(err, &refused) {
			n, err = n+len(refused.Rows), refused.Err // moved aside: progress too
		}
		wait := interval
		if err == nil && n > 0 {
			wait = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}
