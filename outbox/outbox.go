// Package outbox is transactional enqueue from SQL: a job written inside a
// database/sql transaction reaches Redis only if that transaction commits,
// and exactly once. Enqueue inserts the job into an outbox table in the
// caller's transaction; a Relay moves committed rows to Redis (through
// broker.EnqueueMany, under the job's id, so a row relayed twice after a
// crash is refused as a duplicate) and deletes them.
//
// A row Redis will never take (a payload over the broker's limit, an
// invalid queue name, a dependency that does not exist, unreadable
// options) is moved to the table <outbox table>_refused with its reason, in
// the transaction that deletes the relayed rows, so it cannot hold up the
// rows behind it; Refused lists such rows. A transient failure (Redis
// unreachable) leaves rows where they are for the next round.
//
// The SQL is PostgreSQL's (FOR UPDATE SKIP LOCKED lets several relays run
// at once without taking the same rows).
package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/fenceq/fenceq/broker"
)

// TableDefault is the outbox table's name when none is given.
const TableDefault = "fenceq_outbox"

// row is a job's options as stored in the outbox. Fields are only ever
// added, and omitted when zero, so rows written by an older version read
// as they were meant.
type row struct {
	MaxAttempts          int      `json:"max_attempts,omitempty"`
	Priority             int      `json:"priority,omitempty"`
	DelayMS              int64    `json:"delay_ms,omitempty"`
	RunAtMS              int64    `json:"run_at_ms,omitempty"`
	UniqueKey            string   `json:"unique_key,omitempty"`
	UniqueForMS          int64    `json:"unique_for_ms,omitempty"`
	DependsOn            []string `json:"depends_on,omitempty"`
	RunIfDependencyFails bool     `json:"run_if_dependency_fails,omitempty"`
}

// encodeOptions is the options column of j: every field of broker.Job
// but those with columns of their own (ID, Queue, Kind, Payload).
func encodeOptions(j broker.Job) []byte {
	r := row{MaxAttempts: j.MaxAttempts, Priority: j.Priority, DelayMS: j.Delay.Milliseconds(),
		UniqueKey: j.UniqueKey, UniqueForMS: j.UniqueFor.Milliseconds(),
		DependsOn: j.DependsOn, RunIfDependencyFails: j.RunIfDependencyFails}
	if !j.RunAt.IsZero() {
		r.RunAtMS = j.RunAt.UnixMilli()
	}
	opts, _ := json.Marshal(r)
	return opts
}

// decodeOptions sets the fields of j that encodeOptions stored.
func decodeOptions(opts []byte, j *broker.Job) error {
	var r row
	if err := json.Unmarshal(opts, &r); err != nil {
		return err
	}
	j.MaxAttempts, j.Priority, j.UniqueKey = r.MaxAttempts, r.Priority, r.UniqueKey
	j.Delay, j.UniqueFor = time.Duration(r.DelayMS)*time.Millisecond, time.Duration(r.UniqueForMS)*time.Millisecond
	j.DependsOn, j.RunIfDependencyFails = r.DependsOn, r.RunIfDependencyFails
	if r.RunAtMS > 0 {
		j.RunAt = time.UnixMilli(r.RunAtMS)
	}
	return nil
}

// CreateTable creates the outbox table and its refused table if they do
// not exist. Run it again after upgrading: it adds what is missing.
func CreateTable(ctx context.Context, db *sql.DB, table string) error {
	if table == "" {
		table = TableDefault
	}
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+quote(table)+` (
		seq BIGSERIAL PRIMARY KEY,
		id TEXT NOT NULL UNIQUE,
		queue TEXT NOT NULL,
		kind TEXT NOT NULL,
		payload BYTEA NOT NULL,
		options JSONB NOT NULL,
		created_at TIMESTAMPTZ NOT NULL DEFAULT now())`)
	if err != nil {
		return fmt.Errorf("fenceq: create outbox table %s: %w", table, err)
	}
	// No unique id: a job refused, fixed and enqueued again may be refused
	// again, and that must not fail the relay's transaction.
	_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+quote(refusedTable(table))+` (
		seq BIGINT NOT NULL,
		id TEXT NOT NULL,
		queue TEXT NOT NULL,
		kind TEXT NOT NULL,
		payload BYTEA NOT NULL,
		options JSONB NOT NULL,
		reason TEXT NOT NULL,
		created_at TIMESTAMPTZ NOT NULL,
		refused_at TIMESTAMPTZ NOT NULL DEFAULT now())`)
	if err != nil {
		return fmt.Errorf("fenceq: create outbox table %s: %w", refusedTable(table), err)
	}
	return nil
}

// Enqueue writes j into the outbox inside tx and answers its id (a new
// UUID when j has none). The job reaches Redis once tx commits and a Relay
// runs; if tx rolls back, it never does. b checks the job as Enqueue
// would, so a bad job fails here, inside the transaction.
func Enqueue(ctx context.Context, tx *sql.Tx, b *broker.Broker, table string, j broker.Job) (string, error) {
	if table == "" {
		table = TableDefault
	}
	if err := b.ValidateJob(j); err != nil {
		return "", err
	}
	if j.ID == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return "", fmt.Errorf("fenceq: outbox: new job id: %w", err)
		}
		j.ID = u.String()
	}
	opts := encodeOptions(j)
	payload := j.Payload
	if payload == nil {
		payload = []byte{}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+quote(table)+` (id, queue, kind, payload, options) VALUES ($1, $2, $3, $4, $5)`,
		j.ID, j.Queue, j.Kind, payload, opts); err != nil {
		return "", fmt.Errorf("fenceq: outbox: insert job %q: %w", j.ID, err)
	}
	return j.ID, nil
}

// Relay moves committed outbox rows to Redis.
type Relay struct {
	DB     *sql.DB        // required: the database holding Table
	Broker *broker.Broker // required: where the jobs go
	Table  string         // default TableDefault
	Batch  int            // rows per round; default 500
}

// RelayOnce moves up to a batch of rows, oldest first, and answers how many
// jobs it enqueued. Duplicates (relayed before a crash) and jobs whose
// unique key another job holds are not counted, but their rows are
// deleted too: the job they describe is in Redis. Rows Redis refuses for
// good are moved to the refused table, and the error is then a
// *RefusedError listing them. A job whose dependency is an outbox row
// ahead of it waits for that row. Other rows that fail are kept for the
// next round, and the error says why. Rows another relay holds are
// skipped.
func (r *Relay) RelayOnce(ctx context.Context) (int, error) {
	table, batch := r.Table, r.Batch
	if table == "" {
		table = TableDefault
	}
	if batch <= 0 {
		batch = 500
	}
	tx, err := r.DB.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("fenceq: outbox: begin: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT seq, id, queue, kind, payload, options FROM `+quote(table)+
		` ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`, batch)
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
	for i, res := range r.Broker.EnqueueMany(ctx, jobs) {
		switch {
		case res.Err == nil:
			enqueued++
			relayed = append(relayed, seqs[i])
		case errors.Is(res.Err, broker.ErrJobExists):
			relayed = append(relayed, seqs[i]) // relayed before a crash: done already
		case errors.Is(res.Err, broker.ErrUniqueHeld):
			relayed = append(relayed, seqs[i]) // deduplicated by the caller's own unique key
		case errors.Is(res.Err, broker.ErrInvalid):
			wait, err := r.dependencyAhead(ctx, tx, table, seqs[i], jobs[i], res.Err)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("job %q: %w: looking for its dependency: %w", jobs[i].ID, res.Err, err))
			case !wait:
				refused = append(refused, refusal{seqs[i], res.Err.Error()})
			}
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

// Run relays until ctx ends, at once while there are rows, then every
// interval.
func (r *Relay) Run(ctx context.Context, interval time.Duration) error {
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

// quote quotes a table name for SQL.
func quote(name string) string {
	out := []byte{'"'}
	for i := 0; i < len(name); i++ {
		if name[i] == '"' {
			out = append(out, '"')
		}
		out = append(out, name[i])
	}
	return string(append(out, '"'))
}
