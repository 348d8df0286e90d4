package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// startPair starts a primary and a replica of it, and waits until the
// replica is in sync, so that WAIT can count it.
func startPair(t *testing.T) (primary, replica *redis.Client) {
	t.Helper()
	primary = startServer(t)
	_, port, _ := net.SplitHostPort(primary.Options().Addr)
	replica = startServer(t, "--replicaof", "127.0.0.1", port)
	poll(t, 10*time.Second, "replica in sync", func() (bool, string) {
		repl := replica.Info(context.Background(), "replication").Val()
		return infoValue(repl, "master_link_status") == "up" &&
			strings.Contains(primary.Info(context.Background(), "replication").Val(), "connected_slaves:1"), repl
	})
	return primary, replica
}

// WaitReplicas: an enqueue the replica acknowledged succeeds; asking for
// more replicas than exist answers ErrNotReplicated with the count, while
// the job is stored all the same.
func TestEnqueueWaitReplicas(t *testing.T) {
	t.Parallel()
	primary, replica := startPair(t)
	ctx := context.Background()
	b, err := broker.New(primary, broker.Options{WaitReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	id, err := b.Client().Enqueue(ctx, broker.Job{Queue: "w", Kind: "k"})
	if err != nil {
		t.Fatalf("Enqueue with WaitReplicas=1 and one replica: %v", err)
	}
	// Acknowledged means on the replica: read the job hash there.
	if n := replica.Exists(ctx, "fenceq:{w}:job:"+id).Val(); n != 1 {
		t.Fatalf("job %s acknowledged but not on the replica", id)
	}
	// NOSCRIPT on the durable path: the script is loaded and run again.
	if err := primary.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, e := range b.Client().EnqueueMany(ctx, []broker.Job{{Queue: "w", Kind: "k"}, {Queue: "w2", Kind: "k"}, {Queue: "w", Kind: "k", ID: id}}) {
		if e.ID != id && e.Err != nil {
			t.Fatalf("EnqueueMany with WaitReplicas=1: %v", e.Err)
		}
		if e.ID == id && !errors.Is(e.Err, broker.ErrJobExists) {
			t.Fatalf("duplicate in EnqueueMany: %v, want ErrJobExists", e.Err)
		}
	}

	b2, err := broker.New(primary, broker.Options{WaitReplicas: 2, WaitTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	id, err = b2.Client().Enqueue(ctx, broker.Job{Queue: "w", Kind: "k"})
	if !errors.Is(err, broker.ErrNotReplicated) || !strings.Contains(err.Error(), "1 of 2 replicas") {
		t.Fatalf("Enqueue with WaitReplicas=2 and one replica: %v, want ErrNotReplicated saying 1 of 2", err)
	}
	if took := time.Since(began); took < 100*time.Millisecond {
		t.Fatalf("WAIT returned after %v, before its 100ms timeout", took)
	}
	if j, err := b2.Inspector().Job(ctx, "w", id); err != nil || j.State != broker.StatePending {
		t.Fatalf("job not replicated in time should still be stored and pending: %+v, %v", j, err)
	}
	for _, e := range b2.Client().EnqueueMany(ctx, []broker.Job{{Queue: "w", Kind: "k"}, {Queue: "w2", Kind: "k"}}) {
		if !errors.Is(e.Err, broker.ErrNotReplicated) {
			t.Fatalf("EnqueueMany with WaitReplicas=2: %v, want ErrNotReplicated", e.Err)
		}
	}

	// Through a Batcher, each job of a shared round trip is answered by
	// the WAIT that followed it.
	for _, tc := range []struct {
		b        *broker.Broker
		replicas int
		want     error
	}{{b, 1, nil}, {b2, 2, broker.ErrNotReplicated}} {
		bt, err := broker.NewBatcher(tc.b.Client(), broker.BatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id, err := bt.Enqueue(ctx, broker.Job{Queue: fmt.Sprint("w", i%2), Kind: "k"})
				if !errors.Is(err, tc.want) {
					t.Errorf("Batcher.Enqueue with WaitReplicas=%d: %v, want %v", tc.replicas, err, tc.want)
				}
				if tc.want == nil && replica.Exists(ctx, fmt.Sprintf("fenceq:{w%d}:job:%s", i%2, id)).Val() != 1 {
					t.Errorf("job %s acknowledged through a Batcher but not on the replica", id)
				}
			}()
		}
		wg.Wait()
		_ = bt.Close()
	}
}

// startSentinels runs three sentinels monitoring primary as "m", with short
// timeouts so that a failover takes seconds, and waits until they know each
// other and the replica (a failover needs a majority of them to agree).
func startSentinels(t *testing.T, primary *redis.Client) []string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not installed: %v", err)
		}
		t.Skipf("SKIP: redis-server not installed: %v", err)
	}
	host, port, _ := net.SplitHostPort(primary.Options().Addr)
	var addrs []string
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		sport := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		dir := t.TempDir()
		// A sentinel rewrites its config file, so each has its own.
		conf := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(conf, fmt.Appendf(nil, "port %d\nbind 127.0.0.1\ndir %s\n"+
			"sentinel monitor m %s %s 2\nsentinel down-after-milliseconds m 1000\nsentinel failover-timeout m 5000\n",
			sport, dir, host, port), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(path, conf, "--sentinel")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start sentinel: %v", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(sport))
	}
	for _, addr := range addrs {
		s := redis.NewSentinelClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = s.Close() })
		poll(t, 20*time.Second, "sentinel "+addr+" to see the others and the replica", func() (bool, string) {
			m, err := s.Master(context.Background(), "m").Result()
			return err == nil && m["num-other-sentinels"] == "2" && m["num-slaves"] == "1", fmt.Sprint(m, err)
		})
	}
	return addrs
}

// TestSentinelFailover kills the primary under a working pool; the pool, on
// a FailoverClient, must follow the primary the sentinels promote without
// a restart.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	primary, replica := startPair(t)
	sentinels := startSentinels(t, primary)
	ctx := context.Background()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: sentinels,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const q = "s"
	var logs syncBuffer
	var failedAt atomic.Int64 // unix nanos of the kill; 0 before
	var firstAfter atomic.Int64
	var done atomic.Int64
	enqueuedAfter := sync.Map{} // ids acknowledged after the kill
	p, err := worker.New(b, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		done.Add(1)
		if _, ok := enqueuedAfter.Load(j.ID); ok {
			firstAfter.CompareAndSwap(0, time.Now().UnixNano())
		}
		return nil
	}), worker.Config{Queues: []worker.Queue{{Name: q}}, Concurrency: 4, LeaseDuration: 2 * time.Second,
		PollInterval: 100 * time.Millisecond, ShutdownTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	shutdown := func() {
		if stopped {
			return
		}
		stopped = true
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			t.Errorf("pool Shutdown (stuck pool?): %v", err)
		}
	}
	t.Cleanup(shutdown)

	var mu sync.Mutex
	var acked []string
	failed := 0
	stop := make(chan struct{})
	producer := make(chan struct{})
	go func() {
		defer close(producer)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			after := failedAt.Load() != 0
			ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
			id, err := b.Client().Enqueue(ectx, broker.Job{Queue: q, Kind: "k"})
			cancel()
			mu.Lock()
			if err != nil {
				failed++
			} else {
				acked = append(acked, id)
				if after {
					enqueuedAfter.Store(id, true)
				}
			}
			mu.Unlock()
		}
	}()
	poll(t, 20*time.Second, "jobs to flow before the failover", func() (bool, string) { return done.Load() >= 100, logs.String() })

	// SIGKILL: no goodbye to sentinels, replica or clients.
	failedAt.Store(time.Now().UnixNano())
	if err := syscall.Kill(pid(t, primary), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "a job enqueued after the failover to complete", func() (bool, string) {
		return firstAfter.Load() != 0, fmt.Sprintf("replica role %s\n%s", role(replica), logs.String())
	})
	took := time.Duration(firstAfter.Load() - failedAt.Load())
	from := done.Load()
	poll(t, 20*time.Second, "the pool to keep working after the failover", func() (bool, string) {
		return done.Load() >= from+100, logs.String()
	})
	close(stop)
	<-producer

	lost, notDone := 0, 0
	poll(t, 20*time.Second, "acknowledged jobs to finish", func() (bool, string) {
		lost, notDone = 0, 0
		for _, id := range acked {
			j, err := b.Inspector().Job(ctx, q, id)
			switch {
			case errors.Is(err, broker.ErrJobNotFound):
				lost++
			case err != nil:
				return false, err.Error()
			case j.State != broker.StateDone:
				notDone++
			}
		}
		return notDone == 0, fmt.Sprintf("%d jobs not done\n%s", notDone, logs.String())
	})
	shutdown()
	t.Logf("sentinel failover: enqueued=%d done=%d lost=%d enqueue_errors=%d took=%v (new primary %s)",
		len(acked), len(acked)-lost, lost, failed, took.Round(time.Millisecond), replica.Options().Addr)
	if r := role(replica); r != "master" {
		t.Errorf("replica's role after the failover is %q, want master", r)
	}
	bad, err := b.Inspector().Check(ctx, q)
	if err != nil || len(bad) > 0 {
		t.Errorf("Check after the failover: %v %v", bad, err)
	}
}
