package outbox_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/outbox"
	"github.com/fenceq/fenceq/worker"
)

// A job enqueued inside a SQL transaction reaches Redis only if the
// transaction commits; a pool given the relay moves it there.
func Example() {
	ctx := context.Background()
	var (
		db *sql.DB        // your PostgreSQL, e.g. sql.Open("pgx", url)
		b  *broker.Broker // broker.New(rdb, broker.Options{})
	)
	if err := outbox.CreateTable(ctx, db, ""); err != nil { // once; again after upgrading
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	// ... the transaction's own writes ...
	if _, err := outbox.Enqueue(ctx, tx, b, "", broker.Job{Queue: "emails", Kind: "welcome", Payload: []byte(`{"to":"ada"}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	relay, err := outbox.NewRelay(db, b, outbox.RelayOptions{}) // fenceq_outbox, 500 rows a round
	if err != nil {
		log.Fatal(err)
	}
	_ = worker.Config{Queues: []worker.Queue{{Name: "emails"}}, Outbox: relay}
}
