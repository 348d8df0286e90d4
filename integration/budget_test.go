package integration

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// budgetJobs is how many jobs each of the cost budget's workloads runs.
// Enough that what a workload does once (a queue's first use, the pool's
// claims and wait around its last job) falls under 0.01 a job, few enough
// that the test takes a few seconds under the race detector.
const budgetJobs = 2000

// budgetDoc is where the budget is written, and budgetSection its heading.
const (
	budgetDoc     = "../docs/benchmarks.md"
	budgetSection = "## The cost budget"
)

// The paths of the budget, as named in the first column of its table.
const (
	pathEnqueue = "plain enqueue"
	pathPool1   = "one job at concurrency 1"
	pathClaim50 = "claim of 50"
	pathAck50   = "ack of 50"
	// The grouped paths: the same calls, every job in a group, no group
	// limits.
	pathGroupEnqueue = "grouped enqueue"
	pathGroupClaim50 = "grouped claim of 50"
	pathGroupAck50   = "grouped ack of 50"
)

// budgetPaths are the rows the budget must have.
var budgetPaths = []string{pathEnqueue, pathPool1, pathClaim50, pathAck50, pathGroupEnqueue, pathGroupClaim50, pathGroupAck50}

// scriptCommands are the commands that run a script or a function: a
// script call per job counts them.
var scriptCommands = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

// TestCostBudget runs each hot path on a private redis-server with no
// feature in use and counts what Redis ran per job (INFO commandstats after
// CONFIG RESETSTAT): every command, those run inside scripts included, and
// the script calls. It fails when a path costs more than the budget in
// docs/benchmarks.md ("The cost budget"). The counts do not depend on
// timing, so the race detector and a busy machine leave them alone but
// for the pool's background work (see pool1 below).
//
//	go test ./integration/ -run TestCostBudget -v
func TestCostBudget(t *testing.T) {
	// Its own server: commandstats are server-wide, and other packages'
	// tests use the shared one at the same time.
	admin := startServer(t)
	ctx := context.Background()
	budget := readBudget(t)

	// What measuring itself leaves in the counts: CONFIG RESETSTAT counts
	// itself once the counters are reset, while INFO reads them before it
	// counts (Redis adds a command's call after it ran). Measured here on
	// the idle server, on admin's connection (already open), and taken off
	// every measurement below, so the figures hold the workload's commands
	// only, whatever this Redis version names them.
	harness := countCommands(t, admin, func() {})
	t.Logf("measuring itself counts %v, taken off every figure", harness)

	// The workload runs on a client of its own, whose first connection
	// opens (HELLO, CLIENT SETINFO) before counting starts: the broker
	// reuses it for one call at a time.
	rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, PoolSize: 20})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{Prefix: "budget"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	warmUp(t, b)

	type path struct {
		name string
		run  func(t *testing.T, b *broker.Broker, admin *redis.Client, queue string) map[string]int64
	}
	paths := []path{
		{pathEnqueue, measureEnqueue},
		{pathPool1, measurePool1},
		{pathClaim50, measureClaim50},
		{pathAck50, measureAck50},
		{pathGroupEnqueue, measureGroupEnqueue},
		{pathGroupClaim50, measureGroupClaim50},
		{pathGroupAck50, measureGroupAck50},
	}
	type row struct {
		name             string
		commands, script float64
		byCommand        map[string]int64
	}
	var rows []row
	for i, p := range paths {
		counts := subtract(p.run(t, b, admin, fmt.Sprintf("budget%d", i)), harness)
		var total, scripts int64
		for name, n := range counts {
			total += n
			if slices.Contains(scriptCommands, name) {
				scripts += n
			}
		}
		rows = append(rows, row{p.name, float64(total) / budgetJobs, float64(scripts) / budgetJobs, counts})
		// Between paths, so each starts on an empty database (the loaded
		// scripts stay).
		if err := admin.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}

	var table strings.Builder
	fmt.Fprintf(&table, "%d jobs a path, measured:\n", budgetJobs)
	fmt.Fprintln(&table, "| path | commands/job | script calls/job | budget | commands |")
	fmt.Fprintln(&table, "| --- | ---: | ---: | --- | --- |")
	for _, r := range rows {
		lim := budget[r.name]
		fmt.Fprintf(&table, "| %s | %.3f | %.3f | %.2f / %.2f | %s |\n", r.name, r.commands, r.script,
			lim.commands, lim.scripts, formatCounts(r.byCommand))
	}
	t.Log("\n" + table.String())
	for _, r := range rows {
		lim, ok := budget[r.name]
		if !ok {
			t.Errorf("%s: no budget in %s, section %q", r.name, budgetDoc, budgetSection)
			continue
		}
		if r.commands > lim.commands {
			t.Errorf("%s: %.3f Redis commands per job, over its budget of %.2f (%s, %q)", r.name, r.commands, lim.commands, budgetDoc, budgetSection)
		}
		if r.script > lim.scripts {
			t.Errorf("%s: %.3f script calls per job, over its budget of %.2f (%s, %q)", r.name, r.script, lim.scripts, budgetDoc, budgetSection)
		}
	}
}

// warmUp runs every path once on a queue of its own, before anything is
// counted, so that what the broker does once (a script not yet loaded,
// whatever it learns of the server) does not land in a path's count.
func warmUp(t *testing.T, b *broker.Broker) {
	t.Helper()
	ctx := context.Background()
	q := "warm"
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "noop"}); err != nil {
		t.Fatal(err)
	}
	res, err := b.Leases().Claim(ctx, q, 50, time.Minute)
	if err != nil || len(res.Leases) != 1 {
		t.Fatalf("warm-up claim: %d leases, %v", len(res.Leases), err)
	}
	if _, err := b.Leases().AckMany(ctx, []broker.Ack{{Lease: res.Leases[0]}}); err != nil {
		t.Fatal(err)
	}
}

// measureEnqueue: budgetJobs plain jobs, one Enqueue call each.
func measureEnqueue(t *testing.T, b *broker.Broker, admin *redis.Client, q string) map[string]int64 {
	ctx := context.Background()
	return countCommands(t, admin, func() {
		for range budgetJobs {
			if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "noop", Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// measurePool1: a worker.Pool at concurrency 1 with a no-op handler works
// through budgetJobs pending jobs. Counting starts once the pool runs its
// first job, so the pool's start (its server checks, script loads, first
// reap) and that first claim are not counted; the figure is the pool's
// steady state, budgetJobs acks each fused with the next claim, the last
// of which finds the queue empty. Counting ends when the pool has counted
// every job succeeded, which it does after the ack's reply. Counted with
// it is the pool's background work during the run: the retention trims
// due every Config.ReapBatch finished jobs, and a claim or two and a
// blocking wait for a wake-up around the last job. The reaper and the
// heartbeat run every 10 s, so not again in a run of a few seconds.
func measurePool1(t *testing.T, b *broker.Broker, admin *redis.Client, q string) map[string]int64 {
	ctx := context.Background()
	enqueueN(t, b, q, budgetJobs)
	first, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		once.Do(func() { close(first); <-gate })
		return nil
	})
	p, err := worker.New(b, h, worker.Config{Queues: []worker.Queue{{Name: q}}, Concurrency: 1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			t.Error(err)
		}
	}()
	<-first
	counts := countCommands(t, admin, func() {
		close(gate)
		deadline := time.Now().Add(2 * time.Minute)
		for p.Stats().Succeeded < budgetJobs {
			if time.Now().After(deadline) {
				t.Fatalf("the pool settled %d of %d jobs in 2 minutes: %+v", p.Stats().Succeeded, budgetJobs, p.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	})
	if s := p.Stats(); s.Succeeded != budgetJobs || s.Claimed != budgetJobs {
		t.Fatalf("the pool claimed %d and settled %d jobs, want %d each: %+v", s.Claimed, s.Succeeded, budgetJobs, s)
	}
	return counts
}

// measureClaim50: Claim of 50 at a time over budgetJobs pending jobs
// (budgetJobs/50 calls, each taking 50).
func measureClaim50(t *testing.T, b *broker.Broker, admin *redis.Client, q string) map[string]int64 {
	enqueueN(t, b, q, budgetJobs)
	return countCommands(t, admin, func() { claimAll(t, b, q) })
}

// measureAck50: AckMany of 50 leases a call, no claim with them, over
// budgetJobs claimed jobs.
func measureAck50(t *testing.T, b *broker.Broker, admin *redis.Client, q string) map[string]int64 {
	enqueueN(t, b, q, budgetJobs)
	leases := claimAll(t, b, q)
	return countCommands(t, admin, func() { ackAll(t, b, leases) })
}

// ackAll acks leases, 50 a call, no claim with them.
func ackAll(t *testing.T, b *broker.Broker, leases []broker.Lease) {
	t.Helper()
	for batch := range slices.Chunk(leases, 50) {
		acks := make([]broker.Ack, len(batch))
		for i, l := range batch {
			acks[i] = broker.Ack{Lease: l}
		}
		out, err := b.Leases().AckMany(context.Background(), acks)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out {
			if o != broker.OK {
				t.Fatalf("ack: %v", o)
			}
		}
	}
}

// measureGroupEnqueue: budgetJobs jobs over 100 groups (job i in group
// i mod 100), one Enqueue call each.
func measureGroupEnqueue(t *testing.T, b *broker.Broker, admin *redis.Client, q string) map[string]int64 {
	ctx := context.Background()
	return countCommands(t, admin, func() {
		for i := range budgetJobs {
			j := broker.Job{Queue: q, Kind: "noop", Payload: []byte(`{}`), Group: budgetGroup(i, 100)}
			if _, err := b.Client().Enqueue(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// measureGroupClaim50: Claim of 50 at a time over budgetJobs pending jobs
// in 50 groups of 40 (enqueued in turn, not counted).
func measureGroupClaim50(t *testing.T, b *broker.Broker, admin *redis.Client, q string) map[string]int64 {
	enqueueGroups(t, b, q, budgetJobs, 50)
	return countCommands(t, admin, func() { claimAll(t, b, q) })
}

// measureGroupAck50: AckMany of 50 leases a call over budgetJobs claimed
// jobs in 50 groups of 40.
func measureGroupAck50(t *testing.T, b *broker.Broker, admin *redis.Client, q string) map[string]int64 {
	enqueueGroups(t, b, q, budgetJobs, 50)
	leases := claimAll(t, b, q)
	return countCommands(t, admin, func() { ackAll(t, b, leases) })
}

// budgetGroup names job i's group among groups: "g<i mod groups>".
func budgetGroup(i, groups int) string { return "g" + strconv.Itoa(i%groups) }

// enqueueN enqueues n plain jobs in batches (not counted).
func enqueueN(t *testing.T, b *broker.Broker, q string, n int) {
	t.Helper()
	enqueueGroups(t, b, q, n, 0)
}

// enqueueGroups enqueues n jobs in batches (not counted): job i in group
// i mod groups, or in none when groups is 0.
func enqueueGroups(t *testing.T, b *broker.Broker, q string, n, groups int) {
	t.Helper()
	jobs := make([]broker.Job, n)
	for i := range jobs {
		jobs[i] = broker.Job{Queue: q, Kind: "noop", Payload: []byte(`{}`)}
		if groups > 0 {
			jobs[i].Group = budgetGroup(i, groups)
		}
	}
	for batch := range slices.Chunk(jobs, 500) {
		for _, r := range b.Client().EnqueueMany(context.Background(), batch) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
}

// claimAll claims q's budgetJobs pending jobs, 50 a call.
func claimAll(t *testing.T, b *broker.Broker, q string) []broker.Lease {
	t.Helper()
	var leases []broker.Lease
	for len(leases) < budgetJobs {
		res, err := b.Leases().Claim(context.Background(), q, 50, 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Leases) != 50 {
			t.Fatalf("claim of 50 took %d, with %d of %d claimed", len(res.Leases), len(leases), budgetJobs)
		}
		leases = append(leases, res.Leases...)
	}
	return leases
}

// countCommands resets the server's command counters, runs work, and
// answers the calls of each command since (INFO commandstats), those of
// the measuring included: take off what countCommands of no work counts.
func countCommands(t *testing.T, admin *redis.Client, work func()) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	work()
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	counts, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

// parseCommandStats reads the calls of each command from INFO
// commandstats ("cmdstat_evalsha:calls=40,usec=...").
func parseCommandStats(info string) (map[string]int64, error) {
	counts := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, fields, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(fields, ",")
		v, ok := strings.CutPrefix(calls, "calls=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("commandstats line %q: no calls=N", sc.Text())
		}
		counts[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return counts, sc.Err()
}

// subtract answers counts less base, leaving out commands that fall to 0.
func subtract(counts, base map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for name, n := range counts {
		if n -= base[name]; n != 0 {
			out[name] = n
		}
	}
	return out
}

// formatCounts lists commands by calls, most first: "hset 6000, ...".
func formatCounts(counts map[string]int64) string {
	names := slices.Collect(maps.Keys(counts))
	slices.SortFunc(names, func(a, b string) int {
		if c := counts[b] - counts[a]; c != 0 {
			return int(c)
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s %d", name, counts[name])
	}
	return strings.Join(parts, ", ")
}

// pathBudget is one row of the budget: the most a path may cost per job.
type pathBudget struct{ commands, scripts float64 }

// readBudget reads the table of docs/benchmarks.md's "The cost budget"
// section: its first column names the path, its second and third are the
// commands and the script calls per job it may cost.
func readBudget(t *testing.T) map[string]pathBudget {
	t.Helper()
	doc, err := os.ReadFile(budgetDoc)
	if err != nil {
		t.Fatal(err)
	}
	budget, err := parseBudget(string(doc))
	if err != nil {
		t.Fatalf("%s: %v", budgetDoc, err)
	}
	return budget
}

// parseBudget reads the first table after the line budgetSection.
func parseBudget(doc string) (map[string]pathBudget, error) {
	_, section, ok := strings.Cut(doc, "\n"+budgetSection+"\n")
	if !ok {
		return nil, fmt.Errorf("no section %q", budgetSection)
	}
	budget := map[string]pathBudget{}
	inTable := false
	for line := range strings.Lines(section) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "## ") {
			break
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if !inTable { // the header, then the delimiter row
			inTable = true
			continue
		}
		if strings.HasPrefix(cells[0], "---") || strings.HasPrefix(cells[0], ":--") {
			continue
		}
		if len(cells) < 3 {
			return nil, fmt.Errorf("budget row %q: want path | commands/job | script calls/job | ...", line)
		}
		cmds, err1 := strconv.ParseFloat(cells[1], 64)
		scripts, err2 := strconv.ParseFloat(cells[2], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("budget row %q: the 2nd and 3rd cells must be numbers", line)
		}
		budget[cells[0]] = pathBudget{cmds, scripts}
	}
	for _, p := range budgetPaths {
		if _, ok := budget[p]; !ok {
			return nil, fmt.Errorf("section %q has no row %q", budgetSection, p)
		}
	}
	return budget, nil
}

// TestParseBudget reads the budget table as docs/benchmarks.md writes it,
// and refuses one that lacks a path or whose figures are not numbers.
func TestParseBudget(t *testing.T) {
	doc := "# Benchmarks\n\n" + budgetSection + "\n\nSome text.\n\n" +
		"| path | commands/job budget | script calls/job budget | before | after |\n" +
		"| --- | ---: | ---: | --- | --- |\n" +
		"| plain enqueue | 9.01 | 1.01 | 9.001 / 1.000 | |\n" +
		"| one job at concurrency 1 | 23.16 | 1.07 | | |\n" +
		"| claim of 50 | 3.27 | 0.03 | | |\n" +
		"| ack of 50 | 5.09 | 0.03 | | |\n" +
		"| grouped enqueue | 8.01 | 1.01 | | |\n" +
		"| grouped claim of 50 | 3.5 | 0.03 | | |\n" +
		"| grouped ack of 50 | 2.2 | 0.03 | | |\n\n" +
		"| not | the | budget |\n| --- | --- | --- |\n| x | 1 | 2 |\n\n" +
		"## Next\n\n| plain enqueue | 1 | 1 |\n"
	got, err := parseBudget(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]pathBudget{pathEnqueue: {9.01, 1.01}, pathPool1: {23.16, 1.07}, pathClaim50: {3.27, 0.03}, pathAck50: {5.09, 0.03},
		pathGroupEnqueue: {8.01, 1.01}, pathGroupClaim50: {3.5, 0.03}, pathGroupAck50: {2.2, 0.03}}
	if !maps.Equal(got, want) {
		t.Fatalf("parseBudget = %v, want %v", got, want)
	}
	for name, bad := range map[string]string{
		"no section":   strings.Replace(doc, budgetSection, "## Budget", 1),
		"a path gone":  strings.Replace(doc, "| claim of 50 | 3.27 | 0.03 | | |\n", "", 1),
		"not a number": strings.Replace(doc, "| 5.09 |", "| 5.09 a job |", 1),
	} {
		if _, err := parseBudget(bad); err == nil {
			t.Errorf("%s: parseBudget answered no error", name)
		}
	}
}

// TestParseCommandStats reads the calls of each command, subcommands
// named as Redis 7 names them.
func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=40,usec=1200,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=112,usec_per_call=112.00,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"evalsha": 40, "config|resetstat": 1}; !maps.Equal(got, want) {
		t.Fatalf("parseCommandStats = %v, want %v", got, want)
	}
	if _, err := parseCommandStats("cmdstat_get:usec=3\r\n"); err == nil {
		t.Error("a line without calls= answered no error")
	}
}
