// Command fencedsql shows the fencing pattern in SQL: a handler's UPDATE
// carries its job's generation and only applies if no later claim of the
// job wrote first, so a worker that lost its lease cannot overwrite its
// successor's write.
//
//	go run ./examples/fencedsql                                   # local PostgreSQL, database test
//	go run ./examples/fencedsql -pg postgres://user@host/db
//
// It uses an embedded Redis for the queue.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// setBalance is the fenced write: it applies only while no later claim of
// the job has written, and reports whether it did.
func setBalance(ctx context.Context, db *sql.DB, account int, balance string, j *handlers.Job) (bool, error) {
	res, err := db.ExecContext(ctx, `UPDATE fenced_accounts
		SET balance = $1, fence_job = $2, fence = $3
		WHERE id = $4 AND (fence_job IS DISTINCT FROM $2 OR fence <= $3)`,
		balance, j.ID, j.Generation, account)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func main() {
	pg := flag.String("pg", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL URL")
	flag.Parse()
	ctx := context.Background()
	db, err := sql.Open("pgx", *pg)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS fenced_accounts;
		CREATE TABLE fenced_accounts (id INT PRIMARY KEY, balance TEXT, fence_job TEXT, fence BIGINT NOT NULL DEFAULT 0);
		INSERT INTO fenced_accounts (id, balance) VALUES (7, 'initial')`); err != nil {
		log.Fatalf("prepare the table (is PostgreSQL at %s?): %v", *pg, err)
	}
	defer db.ExecContext(ctx, `DROP TABLE fenced_accounts`)

	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	b, _ := broker.New(rdb, broker.Options{})
	quiet := slog.New(slog.DiscardHandler)

	aStarted, bDone, aDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	pa, _ := worker.New(b, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		close(aStarted)
		<-bDone // A stalls past the moment its job is taken from it
		ok, err := setBalance(ctx, db, 7, "set by A", j)
		fmt.Printf("A (generation %d) writes late: applied=%v %v\n", j.Generation, ok, errString(err))
		close(aDone)
		return err
	}), worker.Config{Concurrency: 1, Logger: quiet})
	if err := pa.Start(ctx); err != nil {
		log.Fatal(err)
	}
	id, _ := b.Client().Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "set_balance"})
	<-aStarted
	if _, err := b.Inspector().ReleaseUnowned(ctx, worker.QueueDefault, id); err != nil { // an operator's force-release
		log.Fatal(err)
	}
	pb, _ := worker.New(b, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		ok, err := setBalance(ctx, db, 7, "set by B", j)
		fmt.Printf("B (generation %d) writes: applied=%v %v\n", j.Generation, ok, errString(err))
		close(bDone)
		return err
	}), worker.Config{Logger: quiet})
	if err := pb.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-aDone
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = pa.Shutdown(sctx)
	_ = pb.Shutdown(sctx)
	var balance string
	var fence int64
	_ = db.QueryRowContext(ctx, `SELECT balance, fence FROM fenced_accounts WHERE id = 7`).Scan(&balance, &fence)
	fmt.Printf("account 7: %q (fence %d)\n", balance, fence)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
