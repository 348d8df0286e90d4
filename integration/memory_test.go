package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// fill puts n jobs with a 64-byte payload into queue and settles them:
// the first done, the next dead after three failed attempts with errors,
// the rest left pending.
func fill(t *testing.T, b *broker.Broker, queue string, done, dead, pending int) {
	t.Helper()
	ctx := context.Background()
	payload := []byte(`{"to":"ada@example.com","template":"welcome","locale":"en-GB"}  `) // 64 bytes
	enqueue := func(n int) {
		for range n {
			if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: queue, Kind: "mail", Payload: payload, MaxAttempts: 3}); err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue(done + dead)
	for settled := 0; settled < done; {
		c, err := b.Leases().Claim(ctx, queue, min(100, done-settled), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range c.Leases {
			if _, err := b.Leases().Ack(ctx, l, []byte(`{"sent":true}`)); err != nil {
				t.Fatal(err)
			}
			settled++
		}
	}
	for { // the rest fail until their attempts are spent
		c, err := b.Leases().Claim(ctx, queue, 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Leases) == 0 {
			break
		}
		for _, l := range c.Leases {
			msg := fmt.Sprintf("attempt %d: dial tcp 10.0.0.7:25: connect: connection refused", l.Attempt)
			if _, err := b.Leases().Fail(ctx, l, broker.Failure{Error: msg}); err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue(pending)
}

// Footprint's estimate of a queue is what MEMORY USAGE says of all its
// keys, read exactly, within 5%; and it accounts for most of what the
// queue made used_memory grow (the rest: the keyspace's own table, the
// claim replies kept for a minute, Lua's heap).
func TestFootprintRealRedis(t *testing.T) {
	t.Parallel()
	rdb := startServer(t)
	ctx := context.Background()
	b := mustBroker(t, rdb)
	if err := b.LoadScripts(ctx); err != nil { // the script cache is not the queue's
		t.Fatal(err)
	}
	before := usedMemory(t, rdb)
	fill(t, b, "mail", 6000, 2000, 2000)
	grew := usedMemory(t, rdb) - before

	f, err := b.Inspector().Footprint(ctx, "mail")
	if err != nil {
		t.Fatal(err)
	}
	if !f.Measured || f.Unmeasured != "" {
		t.Fatalf("not measured: %q", f.Unmeasured)
	}
	if f.Jobs[broker.StateDone] != 6000 || f.Jobs[broker.StateDead] != 2000 || f.Jobs[broker.StatePending] != 2000 || f.TotalJobs() != 10000 {
		t.Fatalf("jobs %v", f.Jobs)
	}
	if f.Sampled != 3*broker.FootprintSamples {
		t.Fatalf("sampled %d job hashes, want %d from each of 3 states", f.Sampled, broker.FootprintSamples)
	}
	if f.PerState[broker.StatePending] < 100 || f.PerState[broker.StateDone] <= f.PerState[broker.StatePending] ||
		f.PerState[broker.StateDead] <= f.PerState[broker.StateDone] {
		t.Errorf("per job %v: want pending < done (a result, timestamps) < dead (three errors)", f.PerState)
	}
	if f.PerIndexEntry < 10 {
		t.Errorf("an index entry measures %d bytes", f.PerIndexEntry)
	}

	var exact int64
	iter := rdb.Scan(ctx, 0, "fenceq:{mail}:*", 1000).Iterator()
	for iter.Next(ctx) {
		if strings.Contains(iter.Val(), ":claim:") {
			continue // a claim's reply, kept a minute for a resend: not the queue's jobs
		}
		n, err := rdb.MemoryUsage(ctx, iter.Val(), 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		exact += n
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("10000 jobs: estimate %d (indexes %d, other keys %d), exactly %d; used_memory grew %d; per job: pending %d, done %d, dead %d; per index entry %d",
		f.Estimate, f.IndexBytes, f.OtherBytes, exact, grew, f.PerState[broker.StatePending], f.PerState[broker.StateDone], f.PerState[broker.StateDead], f.PerIndexEntry)
	if off := float64(f.Estimate-exact) / float64(exact); off < -0.05 || off > 0.05 {
		t.Errorf("estimate %d bytes, but the queue's keys hold %d (%+.1f%%)", f.Estimate, exact, 100*off)
	}
	if f.Estimate > grew || f.Estimate < grew*3/4 {
		t.Errorf("estimate %d bytes, but used_memory grew %d", f.Estimate, grew)
	}

	empty, err := b.Inspector().Footprint(ctx, "never-used")
	if err != nil || !empty.Measured || empty.Sampled != 0 || empty.PerJob != 0 || empty.Estimate != 0 {
		t.Fatalf("footprint of a queue without keys: %+v, %v", empty, err)
	}
}

func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	ms, err := mustBroker(t, rdb).Inspector().ServerMemory(context.Background())
	if err != nil || len(ms) != 1 {
		t.Fatalf("server memory: %v %v", ms, err)
	}
	return ms[0].Used
}

func mustBroker(t *testing.T, rdb redis.UniversalClient) *broker.Broker {
	t.Helper()
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Startup warns, and still starts, when Redis has no maxmemory or less
// than the pool's retention would keep; it is quiet when maxmemory fits.
func TestStartupWarnsAboutMaxmemory(t *testing.T) {
	t.Parallel()
	startLogs := func(t *testing.T, rdb redis.UniversalClient, r *broker.Retention) string {
		t.Helper()
		var logs bytes.Buffer
		p, err := worker.New(mustBroker(t, rdb), handlers.NewMux(), worker.Config{
			Queues:    []worker.Queue{{Name: "mail"}, {Name: "resize"}},
			Retention: r,
			Logger:    slog.New(slog.NewTextHandler(&logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(context.Background()); err != nil {
			t.Fatalf("a memory warning must not stop the pool: %v", err)
		}
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		return logs.String()
	}
	counted := &broker.Retention{Done: worker.KeepForever, Cancelled: worker.KeepForever, Dead: worker.KeepForever,
		MaxDone: 10_000, MaxCancelled: 10_000, MaxDead: 100_000}

	t.Run("no maxmemory", func(t *testing.T) {
		t.Parallel()
		logs := startLogs(t, startServer(t, "--maxmemory", "0"), counted)
		if !strings.Contains(logs, "Redis has no maxmemory") || !strings.Contains(logs, "noeviction") {
			t.Fatalf("no warning about the missing maxmemory in:\n%s", logs)
		}
	})
	t.Run("smaller than count bounds need", func(t *testing.T) {
		t.Parallel()
		// Two queues of 120,000 kept jobs at the default 600 bytes: 144 MB.
		logs := startLogs(t, startServer(t, "--maxmemory", "100mb"), counted)
		if !strings.Contains(logs, "maxmemory may be too small") || !strings.Contains(logs, "retention_bytes=144000000") ||
			!strings.Contains(logs, "retained_jobs=240000") || !strings.Contains(logs, "maxmemory=104857600") {
			t.Fatalf("no warning with the numbers in:\n%s", logs)
		}
	})
	t.Run("the defaults, on queues that never ran a job", func(t *testing.T) {
		t.Parallel()
		// Count and age bounds both set: the counts decide, though no rate
		// was measured yet. Two queues of 30,000 at 600 bytes: 36 MB.
		logs := startLogs(t, startServer(t, "--maxmemory", "20mb"), nil)
		if !strings.Contains(logs, "maxmemory may be too small") || !strings.Contains(logs, "retained_jobs=60000") {
			t.Fatalf("no warning with the numbers in:\n%s", logs)
		}
	})
	t.Run("count bounds that fit", func(t *testing.T) {
		t.Parallel()
		logs := startLogs(t, startServer(t, "--maxmemory", "200mb"), counted)
		if strings.Contains(logs, "maxmemory") {
			t.Fatalf("a warning although 200 MB hold 144 MB:\n%s", logs)
		}
	})
	t.Run("smaller than age bounds need at the measured rate", func(t *testing.T) {
		t.Parallel()
		rdb := startServer(t, "--maxmemory", "20mb")
		// 3000 done in the last hour, kept for a week: 50 a minute, 504,000
		// jobs of a few hundred bytes.
		fill(t, mustBroker(t, rdb), "mail", 3000, 0, 0)
		logs := startLogs(t, rdb, &broker.Retention{Done: 7 * 24 * time.Hour, MaxDone: worker.KeepForever,
			Cancelled: worker.KeepForever, MaxCancelled: 10, Dead: worker.KeepForever, MaxDead: 10})
		if !strings.Contains(logs, "maxmemory may be too small") || !strings.Contains(logs, "retained_jobs=504040") {
			t.Fatalf("no warning with the numbers in:\n%s", logs)
		}
	})
	t.Run("retention that keeps everything", func(t *testing.T) {
		t.Parallel()
		logs := startLogs(t, startServer(t, "--maxmemory", "1gb"), &broker.Retention{MaxDone: 10, MaxCancelled: 10, Dead: worker.KeepForever, MaxDead: worker.KeepForever})
		if !strings.Contains(logs, "maxmemory may be too small") || !strings.Contains(logs, "kept_forever=\"[mail dead resize dead]\"") {
			t.Fatalf("no warning about dead jobs kept forever in:\n%s", logs)
		}
	})
}

// On a Cluster, each queue is measured on the master that holds its slot,
// and its server memory is that master's: with a different maxmemory set
// on each master, every queue reports its own node's.
func TestMemoryOnCluster(t *testing.T) {
	t.Parallel()
	tc := startCluster(t)
	ctx := context.Background()
	b := mustBroker(t, tc.client)
	maxOf := map[string]int64{}
	for i, addr := range sortedKeys(tc.nodes) {
		mm := int64(100+i) << 20
		if err := tc.nodes[addr].ConfigSet(ctx, "maxmemory", fmt.Sprint(mm)).Err(); err != nil {
			t.Fatal(err)
		}
		maxOf[addr] = mm
	}
	all, err := b.Inspector().ServerMemory(ctx)
	if err != nil || len(all) != 3 {
		t.Fatalf("server memory of the masters: %+v, %v", all, err)
	}
	nodes := map[string]bool{}
	for _, q := range []string{"a", "b", "c", "d", "e", "f"} {
		fill(t, b, q, 20, 0, 10)
		f, err := b.Inspector().Footprint(ctx, q)
		if err != nil || !f.Measured || f.Sampled != 2*broker.FootprintSamples || f.Estimate == 0 {
			t.Fatalf("footprint of %s: %+v, %v", q, f, err)
		}
		m, err := b.Inspector().QueueMemory(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		master, err := tc.client.MasterForKey(ctx, "fenceq:{"+q+"}:ready0")
		if err != nil {
			t.Fatal(err)
		}
		if m.Node != master.Options().Addr || m.Max != maxOf[m.Node] || m.Used == 0 {
			t.Fatalf("queue %s: memory %+v; want node %s with maxmemory %d", q, m, master.Options().Addr, maxOf[master.Options().Addr])
		}
		nodes[m.Node] = true
	}
	if len(nodes) < 2 {
		t.Fatalf("six queues all on one master (%v): the test does not cover a second node", nodes)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// workerd inspect shows each queue's bytes per job and footprint as
// broker.Footprint measures them.
func TestWorkerdInspectMemory(t *testing.T) {
	t.Parallel()
	rdb := startServer(t)
	b := mustBroker(t, rdb)
	fill(t, b, "mail", 300, 100, 100)
	f, err := b.Inspector().Footprint(context.Background(), "mail")
	if err != nil {
		t.Fatal(err)
	}
	url := "redis://" + rdb.Options().Addr
	code, out, errOut := workerd(t, "", "inspect", "--json", "--redis", url)
	if code != 0 {
		t.Fatalf("inspect --json: exit %d\n%s%s", code, out, errOut)
	}
	var all struct {
		Queues []struct {
			Queue              string           `json:"queue"`
			Memory             string           `json:"memory"`
			BytesPerJob        *int64           `json:"bytes_per_job"`
			BytesPerJobByState map[string]int64 `json:"bytes_per_job_by_state"`
			IndexEntryBytes    *int64           `json:"index_entry_bytes"`
			FootprintBytes     *int64           `json:"footprint_bytes"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(out), &all); err != nil || len(all.Queues) != 1 {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	q := all.Queues[0]
	if q.Memory != "measured" || q.BytesPerJob == nil || *q.BytesPerJob != f.PerJob || q.IndexEntryBytes == nil ||
		q.FootprintBytes == nil || q.BytesPerJobByState["dead"] != f.PerState[broker.StateDead] {
		t.Fatalf("inspect --json: %s\nwant the footprint %+v", out, f)
	}
	// Within 5% of what broker measured: the claim replies of fill may
	// have expired between the two reads.
	if d := *q.FootprintBytes - f.Estimate; d*20 > f.Estimate || -d*20 > f.Estimate {
		t.Fatalf("footprint %d, broker measured %d", *q.FootprintBytes, f.Estimate)
	}
	code, out, errOut = workerd(t, "", "inspect", "mail", "--redis", url)
	if code != 0 || !strings.Contains(out, "memory: about") || !strings.Contains(out, "per index entry") {
		t.Fatalf("inspect mail: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("inspect mail:\n%s", out)
}
