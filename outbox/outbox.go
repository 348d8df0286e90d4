// Package outbox is transactional enqueue from SQL: a job written inside a
// database/sql transaction reaches Redis only if that transaction commits,
// and exactly once. Enqueue inserts the job into an outbox table in the
// caller's transaction; a Relay moves committed rows to Redis (through
// broker.Client.EnqueueMany, under the job's id, so a row relayed twice after a
// crash is refused as a duplicate) and deletes them. With c a broker's
// Client (Broker.Client):
//
//	err := outbox.CreateTable(ctx, db, outbox.TableDefault) // once; idempotent
//
//	// in the caller's transaction, beside its own writes:
//	id, err := outbox.Enqueue(ctx, tx, c, outbox.TableDefault, broker.Job{Queue: "emails", Kind: "welcome", Payload: body})
//
//	// relayed by a pool (worker.Config.Outbox), or on its own by Relay.Run:
//	relay, err := outbox.NewRelay(db, c, outbox.RelayOptions{})
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
	"fmt"

	"github.com/google/uuid"

	"github.com/fenceq/fenceq/broker"
)

// TableDefault is the outbox table's name when none is given.
const TableDefault = "fenceq_outbox"

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
// runs; if tx rolls back, it never does. c (Broker.Client) checks the job
// as Client.Enqueue would, so a bad job fails here, inside the transaction.
// When c traces (broker.Options.TracerProvider) and ctx holds a span,
// its trace context is kept in (a copy of) j.Metadata, so that the job,
// once relayed, joins the trace of the request that wrote it (the trace
// context is bounded apart from broker.MaxMetadataBytes). A Client that
// does not trace writes none, so its rows stay readable by a relay older
// than job metadata.
func Enqueue(ctx context.Context, tx *sql.Tx, c *broker.Client, table string, j broker.Job) (string, error) {
	if table == "" {
		table = TableDefault
	}
	if c.TracerProvider() != nil {
		// The row keeps the caller's trace context, so the relay's Enqueue
		// joins the request that wrote the row, not the relay round that
		// moves it.
		j.Metadata = broker.WithTraceContext(ctx, j.Metadata)
	}
	if err := c.ValidateJob(j); err != nil {
		return "", err
	}
	if j.ID == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return "", fmt.Errorf("fenceq: outbox: new job id: %w", err)
		}
		j.ID = u.String()
	}
	opts, err := encodeOptions(j)
	if err != nil {
		return "", err
	}
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
