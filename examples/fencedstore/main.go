// Command fencedstore shows why handlers get a fencing token: worker A
// loses its job to an operator's force-release while it still works on it,
// worker B runs the job again, and A's late write to an external store is
// refused because it carries an older generation than B's.
//
//	go run ./examples/fencedstore
//
// The store here is a map; with SQL the same guard is
//
//	UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence < $2
//
// and a write that updates no row is the stale one.
package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// store keeps, for every key, the value and the fencing token of the write
// that set it, and refuses writes whose token is not newer.
type store struct {
	mu    sync.Mutex
	value map[string]string
	fence map[string]int64
}

func (s *store) write(key, value string, fence int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence <= s.fence[key] {
		return fmt.Errorf("stale write refused: token %d is not newer than %d", fence, s.fence[key])
	}
	s.value[key], s.fence[key] = value, fence
	return nil
}

func main() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	db := &store{value: map[string]string{}, fence: map[string]int64{}}
	quiet := slog.New(slog.DiscardHandler)

	aStarted, aDone, bDone := make(chan string), make(chan struct{}), make(chan struct{})
	// Worker A is slow and, like a process in a long GC pause, does not
	// notice that its context was cancelled.
	a := handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		aStarted <- j.ID
		<-bDone
		err := db.write("account-7", "balance set by A", j.Generation)
		fmt.Printf("A (token %d) writes late: %v\n", j.Generation, err)
		close(aDone)
		return err
	})
	pa, err := worker.New(b, a, worker.Config{Concurrency: 1, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	if err := pa.Start(ctx); err != nil {
		log.Fatal(err)
	}
	id, err := b.Client().Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "update_balance"})
	if err != nil {
		log.Fatal(err)
	}
	<-aStarted
	fmt.Println("A claimed the job and is working on it")

	// An operator force-releases the job (workerd release default ID), and
	// worker B runs it again.
	if _, err := b.Inspector().ReleaseUnowned(ctx, worker.QueueDefault, id); err != nil {
		log.Fatal(err)
	}
	fmt.Println("an operator force-released it")
	pb, err := worker.New(b, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		err := db.write("account-7", "balance set by B", j.Generation)
		fmt.Printf("B (token %d) writes: %v\n", j.Generation, errOrOK(err))
		close(bDone)
		return err
	}), worker.Config{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	if err := pb.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-aDone
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = pa.Shutdown(sctx)
	_ = pb.Shutdown(sctx)

	j, _ := b.Inspector().Job(ctx, worker.QueueDefault, id)
	fmt.Printf("store: %q (token %d); job: %s at generation %d\n", db.value["account-7"], db.fence["account-7"], j.State, j.Generation)
}

func errOrOK(err error) any {
	if err == nil {
		return "ok"
	}
	return err
}
