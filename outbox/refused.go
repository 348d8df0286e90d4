package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// RefusedRow is an outbox row the relay set aside because Redis would never
// take it: its payload is over the broker's limit, its queue name or a
// dependency is invalid, its options cannot be read, and the like. It
// stays in the table <outbox table>_refused until you delete it.
type RefusedRow struct {
	Seq             int64           // its place in the outbox
	ID, Queue, Kind string          // the job's id, queue and kind
	Payload         []byte          // as enqueued
	Options         json.RawMessage // the job's other fields, as stored
	Reason          string          // why it was refused
	CreatedAt       time.Time       // when it was written to the outbox
	RefusedAt       time.Time       // when the relay set it aside
}

// RefusedError is RelayOnce's error when it set rows aside: they are in
// Table, the round's other rows were relayed or, when Err is set, kept
// for the next round.
type RefusedError struct {
	Table string       // the refused table: <outbox table>_refused
	Rows  []RefusedRow // the rows set aside in this round
	Err   error        // the round's other failure, or nil
}

func (e *RefusedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fenceq: outbox: %d rows refused, moved to %s:", len(e.Rows), e.Table)
	for _, r := range e.Rows {
		fmt.Fprintf(&b, " job %q: %s;", r.ID, r.Reason)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " and %v", e.Err)
	}
	return strings.TrimSuffix(b.String(), ";")
}

func (e *RefusedError) Unwrap() error { return e.Err }

// Refused lists up to limit rows the relay of table set aside, oldest
// first; limit < 1 lists them all. Fix what a row's reason says and
// enqueue its job again, then delete the row.
func Refused(ctx context.Context, db *sql.DB, table string, limit int) ([]RefusedRow, error) {
	if table == "" {
		table = TableDefault
	}
	var max any // NULL: no limit
	if limit > 0 {
		max = limit
	}
	rows, err := db.QueryContext(ctx, `SELECT `+refusedColumns+` FROM `+quote(refusedTable(table))+` ORDER BY refused_at, seq LIMIT $1`, max)
	if err != nil {
		return nil, fmt.Errorf("fenceq: outbox: list refused rows: %w", err)
	}
	return scanRefused(rows)
}

const refusedColumns = `seq, id, queue, kind, payload, options, reason, created_at, refused_at`

func refusedTable(table string) string { return table + "_refused" }

// refusal is a row to set aside, and why.
type refusal struct {
	seq    int64
	reason string
}

// moveRefused moves rows from the outbox to its refused table, inside the
// relay's transaction: a row is in exactly one of the two.
func moveRefused(ctx context.Context, tx *sql.Tx, table string, refused []refusal) ([]RefusedRow, error) {
	if len(refused) == 0 {
		return nil, nil
	}
	seqs, reasons := make([]int64, len(refused)), make([]string, len(refused))
	for i, r := range refused {
		seqs[i], reasons[i] = r.seq, r.reason
	}
	rows, err := tx.QueryContext(ctx, `WITH moved AS (
			DELETE FROM `+quote(table)+` WHERE seq = ANY($1)
			RETURNING seq, id, queue, kind, payload, options, created_at)
		INSERT INTO `+quote(refusedTable(table))+` (seq, id, queue, kind, payload, options, reason, created_at)
		SELECT m.seq, m.id, m.queue, m.kind, m.payload, m.options, r.reason, m.created_at
		FROM moved m JOIN unnest($1::bigint[], $2::text[]) AS r(seq, reason) ON r.seq = m.seq
		RETURNING `+refusedColumns, seqs, reasons)
	if err != nil {
		return nil, fmt.Errorf("fenceq: outbox: move refused rows to %s (created by CreateTable): %w", refusedTable(table), err)
	}
	return scanRefused(rows)
}

func scanRefused(rows *sql.Rows) ([]RefusedRow, error) {
	defer rows.Close()
	var out []RefusedRow
	for rows.Next() {
		var r RefusedRow
		if err := rows.Scan(&r.Seq, &r.ID, &r.Queue, &r.Kind, &r.Payload, &r.Options, &r.Reason, &r.CreatedAt, &r.RefusedAt); err != nil {
			return nil, fmt.Errorf("fenceq: outbox: read refused row: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("fenceq: outbox: read refused rows: %w", err)
	}
	return out, nil
}

// missingDependency answers the dependency an enqueue was refused for
// because it does not exist.
func missingDependency(err error) (string, bool) {
	var ve *broker.ValidationError
	if !errors.As(err, &ve) || ve.Field != "depends on" {
		return "", false
	}
	return ve.Value, true
}

// dependencyAhead reports whether dep, a job's dependency that Redis does
// not hold, is a row of this outbox ahead of the job's row seq: another
// relay holds it, or it waits beyond this batch. Only rows ahead count, as
// Enqueue wants a job's dependencies to exist before it: so rows that
// depend on each other are refused rather than wait for each other
// forever.
func dependencyAhead(ctx context.Context, tx *sql.Tx, table string, seq int64, queue, dep string) (bool, error) {
	var ahead bool
	err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+quote(table)+` WHERE queue = $1 AND id = $2 AND seq < $3)`,
		queue, dep, seq).Scan(&ahead)
	return ahead, err
}
