package outbox_test

import (
	"context"
	"database/sql"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL driver, as "pgx"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/outbox"
)

// A job enqueued inside a SQL transaction reaches Redis only if the
// transaction commits: the order row and its confirmation email are
// written together or not at all. A Relay (from NewRelay, run on its own
// or by a pool with Config.Outbox) moves committed rows to Redis. This
// example needs a PostgreSQL and a Redis, so it is compiled but not run.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/shop")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		panic(err)
	}
	// Once, at deployment (it is idempotent).
	if err := outbox.CreateTable(ctx, db, outbox.TableDefault); err != nil {
		panic(err)
	}

	// The producer: the job is one more row of the transaction.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, email) VALUES ($1, $2)`, 42, "ada@example.com"); err != nil {
		panic(err)
	}
	if _, err := outbox.Enqueue(ctx, tx, b.Client(), outbox.TableDefault, broker.Job{
		Queue: "emails", Kind: "order_confirmation", Payload: []byte(`{"order":42}`),
	}); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	// The relay: at once while there are rows, then every second, until
	// ctx ends. Several relays may run: they never take the same rows.
	relay, err := outbox.NewRelay(db, b.Client(), outbox.RelayOptions{}) // fenceq_outbox, 500 rows a round
	if err != nil {
		panic(err)
	}
	if err := relay.Run(ctx, time.Second); err != nil && ctx.Err() == nil {
		panic(err)
	}
}
