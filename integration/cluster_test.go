package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/internal/brokertest"
	"github.com/fenceq/fenceq/internal/pooltest"
	"github.com/fenceq/fenceq/worker"
)

// testCluster is a private Redis Cluster: three masters, one replica each.
type testCluster struct {
	client *redis.ClusterClient
	nodes  map[string]*redis.Client // admin client of every node, by address
}

// startCluster starts six cluster-enabled servers (startServer stops them at
// the end of the test, even on failure), joins them with redis-cli and waits
// until every node reports a healthy cluster with all slots served and every
// replica in sync, so that WAIT and failovers behave from the first command.
func startCluster(t *testing.T) *testCluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-cli not installed: %v", err)
		}
		t.Skipf("SKIP: redis-cli not installed (needed to create a cluster): %v", err)
	}
	tc := &testCluster{nodes: map[string]*redis.Client{}}
	var addrs []string
	for range 6 {
		// A short node timeout keeps failure detection quick; it is still
		// far above the pauses a loaded 2-core machine causes.
		c := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "3000")
		addr := c.Options().Addr
		addrs = append(addrs, addr)
		tc.nodes[addr] = c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	poll(t, 30*time.Second, "cluster healthy on every node", func() (bool, string) {
		for addr, c := range tc.nodes {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return false, fmt.Sprintf("%s: %v", addr, err)
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") ||
				!strings.Contains(info, "cluster_known_nodes:6") {
				return false, addr + ": " + info
			}
			//lint:ignore SA1019 CLUSTER SLOTS is what redis-cli and older clients read; Redis 7 still serves it
			slots, err := c.ClusterSlots(ctx).Result()
			if err != nil {
				return false, fmt.Sprintf("%s: %v", addr, err)
			}
			for _, s := range slots {
				if len(s.Nodes) != 2 {
					return false, fmt.Sprintf("%s: slots %d-%d served by %v", addr, s.Start, s.End, s.Nodes)
				}
			}
			repl := c.Info(ctx, "replication").Val()
			if strings.Contains(repl, "role:master") && !strings.Contains(repl, "connected_slaves:1") ||
				strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return false, addr + ": " + repl
			}
		}
		return true, ""
	})
	tc.client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRedirects: 8})
	t.Cleanup(func() { _ = tc.client.Close() })
	poll(t, 10*time.Second, "cluster client sees 3 masters", func() (bool, string) {
		//lint:ignore SA1019 CLUSTER SLOTS is what redis-cli and older clients read; Redis 7 still serves it
		slots, err := tc.client.ClusterSlots(ctx).Result()
		return err == nil && len(slots) >= 3, fmt.Sprint(slots, err)
	})
	return tc
}

// poll calls cond until it holds, and fails the test with cond's last
// explanation when it has not within d.
func poll(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", d, what, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pid is the process id of the server behind c.
func pid(t testing.TB, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatalf("INFO server on %s: %v", c.Options().Addr, err)
	}
	var p int
	if _, err := fmt.Sscan(infoValue(info, "process_id"), &p); err != nil {
		t.Fatalf("no process_id in INFO of %s: %v", c.Options().Addr, err)
	}
	return p
}

func infoValue(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

func role(c *redis.Client) string {
	return infoValue(c.Info(context.Background(), "replication").Val(), "role")
}

// masters maps each master's address to its replica's, from CLUSTER SLOTS.
func (tc *testCluster) masters(t testing.TB) (replicaOf map[string]string, slotMaster func(int) string) {
	t.Helper()
	//lint:ignore SA1019 CLUSTER SLOTS is what redis-cli and older clients read; Redis 7 still serves it
	slots, err := tc.client.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	replicaOf = map[string]string{}
	for _, s := range slots {
		if len(s.Nodes) < 2 {
			t.Fatalf("slots %d-%d have no replica: %+v", s.Start, s.End, s.Nodes)
		}
		replicaOf[s.Nodes[0].Addr] = s.Nodes[1].Addr
	}
	return replicaOf, func(slot int) string {
		for _, s := range slots {
			if slot >= s.Start && slot <= s.End {
				return s.Nodes[0].Addr
			}
		}
		return ""
	}
}

// TestClusterSuites runs the broker conformance suite and the pool
// scenarios on a Redis Cluster: every script must touch one slot only, and
// the tests' own cleanup must reach every master.
//
// Not t.Parallel: the pool scenarios renew 300ms leases every 100ms, which
// a 2-core machine under -race cannot keep up while the failover tests run
// pools and a dozen servers beside them (scenarios then fail on leases lost
// to CPU starvation, not on anything Cluster does). Run alone, it passes.
func TestClusterSuites(t *testing.T) {
	tc := startCluster(t)
	t.Run("Broker", func(t *testing.T) {
		brokertest.Run(t, func(testing.TB) brokertest.Backend {
			return brokertest.Backend{Client: tc.client, Advance: time.Sleep}
		})
	})
	t.Run("Pool", func(t *testing.T) {
		pooltest.Run(t, func(testing.TB) redis.UniversalClient { return tc.client })
	})
}

// enqueueRecord is one Enqueue of the failover test and its answer.
type enqueueRecord struct {
	queue, id string
	phase     int  // 0 before any failover, 1 after the manual one, 2 after the forced one
	durable   bool // through the broker with WaitReplicas=1
	err       error
}

// TestClusterFailover runs a pool per queue over queues spread on all three
// masters while two producers enqueue (one plain, one with WaitReplicas=1),
// fails one master over with a coordinated CLUSTER FAILOVER and then another
// with CLUSTER FAILOVER FORCE while it is frozen (SIGSTOP), and counts what
// became of every enqueue. Losses that asynchronous replication explains are
// logged, not failed on; fenceq's own guarantees are asserted.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	tc := startCluster(t)
	ctx := context.Background()
	replicaOf, slotMaster := tc.masters(t)

	// Nine queues, three on each master, chosen by CLUSTER KEYSLOT.
	var queues []string
	queueMaster := map[string]string{}
	perMaster := map[string]int{}
	for i := 0; len(queues) < 9 && i < 1000; i++ {
		q := fmt.Sprintf("fo%d", i)
		slot, err := tc.client.ClusterKeySlot(ctx, "{"+q+"}").Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		m := slotMaster(int(slot))
		if perMaster[m] < 3 {
			perMaster[m]++
			queues = append(queues, q)
			queueMaster[q] = m
		}
	}
	if len(perMaster) != 3 || len(queues) != 9 {
		t.Fatalf("queues not spread on 3 masters: %v", perMaster)
	}

	// The pools' client times out faster than the default so that a frozen
	// master costs them about a second, less than a lease.
	opts := broker.Options{Prefix: "fqfailover"}
	plain, err := broker.New(tc.client, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.WaitReplicas, opts.WaitTimeout = 1, 500*time.Millisecond
	durable, err := broker.New(tc.client, opts)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	var done atomic.Int64
	runs := sync.Map{} // job id → *atomic.Int32, handler completions
	var pools []*worker.Pool
	for _, q := range queues {
		p, err := worker.New(plain, handlers.HandlerFunc(func(ctx context.Context, j *handlers.Job) error {
			n, _ := runs.LoadOrStore(j.ID, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			done.Add(1)
			return nil
		}), worker.Config{Queues: []worker.Queue{{Name: q}}, Concurrency: 2, LeaseDuration: 2 * time.Second,
			PollInterval: 100 * time.Millisecond, ShutdownTimeout: 2 * time.Second,
			Backoff: func(int) time.Duration { return 50 * time.Millisecond },
			Logger:  slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		pools = append(pools, p)
	}
	shutdown := sync.OnceFunc(func() {
		var wg sync.WaitGroup
		for _, p := range pools {
			wg.Go(func() {
				sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				defer cancel()
				if err := p.Shutdown(sctx); err != nil {
					t.Errorf("pool Shutdown (stuck pool?): %v", err)
				}
			})
		}
		wg.Wait()
	})
	t.Cleanup(shutdown)

	// Two producers, paced, each recording every answer.
	var phase atomic.Int32
	var mu sync.Mutex
	var records []enqueueRecord
	stop := make(chan struct{})
	var producers sync.WaitGroup
	for _, b := range []*broker.Broker{plain, durable} {
		producers.Go(func() {
			tick := time.NewTicker(4 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				q := queues[i%len(queues)]
				r := enqueueRecord{queue: q, phase: int(phase.Load()), durable: b == durable}
				ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
				r.id, r.err = b.Client().Enqueue(ectx, broker.Job{Queue: q, Kind: "k"})
				cancel()
				mu.Lock()
				records = append(records, r)
				mu.Unlock()
			}
		})
	}
	// progress waits until the pools have completed n more jobs: the test's
	// proof that they work (again).
	progress := func(what string, n int64) time.Duration {
		start, from := time.Now(), done.Load()
		poll(t, 20*time.Second, what, func() (bool, string) {
			return done.Load() >= from+n, fmt.Sprintf("%d jobs done since\n%s", done.Load()-from, logs.String())
		})
		return time.Since(start)
	}
	progress("jobs to flow before any failover", 200)

	// Manual failover: the master pauses its clients, the replica catches
	// up, then they swap roles. Nothing acknowledged may be lost.
	masterA := queueMaster[queues[0]]
	replicaA := replicaOf[masterA]
	phase.Store(1)
	began := time.Now()
	if err := tc.nodes[replicaA].Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER on %s: %v", replicaA, err)
	}
	poll(t, 20*time.Second, "manual failover", func() (bool, string) {
		return role(tc.nodes[replicaA]) == "master" && role(tc.nodes[masterA]) == "slave", ""
	})
	manualSwitch := time.Since(began)
	manualResume := progress("jobs to flow after the manual failover", 200)

	// Forced failover of another master, frozen so that it cannot agree:
	// commands sent to it meanwhile wait in its socket and run when it
	// resumes, still believing it is master, until it learns of the new
	// epoch — the window asynchronous replication cannot cover.
	var masterB string
	for m := range replicaOf {
		if m != masterA && m != replicaA {
			masterB = m
			break
		}
	}
	replicaB := replicaOf[masterB]
	pidB := pid(t, tc.nodes[masterB])
	phase.Store(2)
	began = time.Now()
	if err := syscall.Kill(pidB, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s: %v", masterB, err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(pidB, syscall.SIGCONT) // let the cleanup stop it
		}
	}()
	time.Sleep(300 * time.Millisecond) // let commands pile up in the frozen master's sockets
	if err := tc.nodes[replicaB].Do(ctx, "CLUSTER", "FAILOVER", "FORCE").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER FORCE on %s: %v", replicaB, err)
	}
	poll(t, 20*time.Second, "forced failover", func() (bool, string) {
		return role(tc.nodes[replicaB]) == "master", ""
	})
	forcedSwitch := time.Since(began)
	_ = syscall.Kill(pidB, syscall.SIGCONT)
	resumed = true
	poll(t, 20*time.Second, "old master to rejoin as a replica", func() (bool, string) {
		repl := tc.nodes[masterB].Info(ctx, "replication").Val()
		return infoValue(repl, "role") == "slave" && infoValue(repl, "master_link_status") == "up", repl
	})
	forcedResume := progress("jobs to flow after the forced failover", 200)
	close(stop)
	producers.Wait()

	// Drain: every acknowledged job that still exists must end done.
	tc.client.ReloadState(ctx)
	stateOf := func(r enqueueRecord) (broker.State, bool) {
		for range 50 { // a stale slot map answers MOVED until the reload lands
			j, err := plain.Inspector().Job(ctx, r.queue, r.id)
			if errors.Is(err, broker.ErrJobNotFound) {
				return "", false
			}
			if err == nil {
				return j.State, true
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("cannot read job %s of %s", r.id, r.queue)
		return "", false
	}
	poll(t, 30*time.Second, "acknowledged jobs to finish", func() (bool, string) {
		for _, r := range records {
			if r.err != nil {
				continue
			}
			if s, ok := stateOf(r); ok && s != broker.StateDone {
				return false, fmt.Sprintf("job %s of %s is %s\n%s", r.id, r.queue, s, logs.String())
			}
		}
		return true, ""
	})
	shutdown()

	// Count.
	type tally struct{ enqueued, done, other, lost, lostDurable, lostManual, failed, notReplicated, storedAnyway int }
	var all tally
	perQueue := map[string]*tally{}
	for _, q := range queues {
		perQueue[q] = &tally{}
	}
	twice := 0
	for _, r := range records {
		qt := perQueue[r.queue]
		s, present := stateOf(r)
		for _, tt := range []*tally{&all, qt} {
			if r.err != nil {
				tt.failed++
				if errors.Is(r.err, broker.ErrNotReplicated) {
					tt.notReplicated++
				}
				if present && r.id != "" {
					tt.storedAnyway++
				}
				continue
			}
			tt.enqueued++
			switch {
			case !present:
				tt.lost++
				if r.durable {
					tt.lostDurable++
				}
				if r.phase < 2 {
					tt.lostManual++
				}
			case s == broker.StateDone:
				tt.done++
			default:
				tt.other++
			}
		}
		if n, ok := runs.Load(r.id); ok && n.(*atomic.Int32).Load() > 1 {
			twice++
		}
	}
	for _, q := range queues {
		qt := perQueue[q]
		t.Logf("queue %s on %s: enqueued=%d done=%d other=%d lost=%d failed=%d", q, queueMaster[q], qt.enqueued, qt.done, qt.other, qt.lost, qt.failed)
	}
	t.Logf("cluster failover: queues=%d enqueued=%d done=%d other=%d lost=%d (manual=%d forced=%d durable=%d) "+
		"enqueue_errors=%d (not_replicated=%d stored_anyway=%d) ran_more_than_once=%d "+
		"manual: switch=%v resume=%v; forced: switch=%v resume=%v",
		len(queues), all.enqueued, all.done, all.other, all.lost, all.lostManual, all.lost-all.lostManual, all.lostDurable,
		all.failed, all.notReplicated, all.storedAnyway, twice,
		manualSwitch.Round(time.Millisecond), manualResume.Round(time.Millisecond), forcedSwitch.Round(time.Millisecond), forcedResume.Round(time.Millisecond))

	// What fenceq guarantees: no job in two states, every surviving job done.
	for _, q := range queues {
		var bad []broker.Inconsistency
		poll(t, 5*time.Second, "Check on "+q, func() (bool, string) {
			var err error
			bad, err = plain.Inspector().Check(ctx, q)
			return err == nil, fmt.Sprint(err)
		})
		if len(bad) > 0 {
			t.Errorf("queue %s: invariant 6 violated: %v", q, bad)
		}
	}
	if all.other > 0 {
		t.Errorf("%d acknowledged jobs neither done nor lost after the drain", all.other)
	}
	// WAIT's promise, with one replica per master: a write that replica
	// acknowledged is on the node that takes over.
	if all.lostDurable > 0 {
		t.Errorf("%d enqueues acknowledged with WaitReplicas=1 were lost", all.lostDurable)
	}
}
