package integration

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/fence"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// A stale worker's fenced write is refused while its successor's is
// applied: pool A loses its job to an operator's force-release while its
// handler still runs, pool B runs the job again and writes, and A's late
// write carries an older generation.
func TestFencedWriteRefusesStaleWorker(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	prefix := fmt.Sprintf("fqfence-%d", time.Now().UnixNano())
	t.Cleanup(func() { deletePrefixKeys(t, prefix) })
	b, err := broker.New(rdb, broker.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fence.NewRedis(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := prefix + ":account:7"
	quiet := slog.New(slog.DiscardHandler)
	aStarted, aWrote, bWrote := make(chan struct{}), make(chan bool, 1), make(chan bool, 1)
	pa, err := worker.New(b, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		close(aStarted)
		<-bWrote // A stalls; meanwhile its job is taken from it and run by B
		ok, err := f.HSet(ctx, key, fence.TokenOf(j), "balance", "from A")
		aWrote <- ok
		return err
	}), worker.Config{Queues: []worker.Queue{{Name: "fence"}}, Concurrency: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := pa.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer pa.Shutdown(context.Background())
	id, err := b.Client().Enqueue(ctx, broker.Job{Queue: "fence", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	<-aStarted
	if _, err := b.Inspector().ReleaseUnowned(ctx, "fence", id); err != nil {
		t.Fatal(err)
	}
	pb, err := worker.New(b, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		ok, err := f.HSet(ctx, key, fence.TokenOf(j), "balance", "from B")
		bWrote <- ok
		return err
	}), worker.Config{Queues: []worker.Queue{{Name: "fence"}}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := pb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer pb.Shutdown(context.Background())
	// bWrote is read by A's handler; B's answer is checked through Redis.
	select {
	case ok := <-aWrote:
		if ok {
			t.Fatal("the stale worker's write was applied")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("A never wrote")
	}
	if v, _ := rdb.HGet(ctx, key, "balance").Result(); v != "from B" {
		t.Fatalf("balance %q, want the successor's write", v)
	}
}
