package broker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Check reads at most its cap of suspects again; the rest are reported
// as seen by the scan and marked Unconfirmed, after the confirmed ones.
func TestCheckRecheckCap(t *testing.T) {
	b, rdb := checkBroker(t)
	ctx := context.Background()
	k := b.queueKeys("q")
	for i := range 5 {
		if err := rdb.ZAdd(ctx, k.done(), redis.Z{Score: 1, Member: fmt.Sprintf("ghost-%d", i)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	bad, err := b.check(ctx, "q", 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range bad {
		got = append(got, i.String())
	}
	want := []string{
		"ghost-0: listed in [done] but the job hash does not exist",
		"ghost-1: listed in [done] but the job hash does not exist",
		"ghost-2: listed in [done] but the job hash does not exist (seen by the scan, not re-read: over CheckRecheckMax)",
		"ghost-3: listed in [done] but the job hash does not exist (seen by the scan, not re-read: over CheckRecheckMax)",
		"ghost-4: listed in [done] but the job hash does not exist (seen by the scan, not re-read: over CheckRecheckMax)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Check with a cap of 2 answered\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A SCRIPT FLUSH between Check's loading of check_one and its pipeline of
// re-reads costs one more load, not the check.
func TestCheckRecheckAfterScriptFlush(t *testing.T) {
	b, rdb := checkBroker(t)
	ctx := context.Background()
	if err := rdb.ZAdd(ctx, b.queueKeys("q").done(), redis.Z{Score: 1, Member: "ghost"}).Err(); err != nil {
		t.Fatal(err)
	}
	f := &flushOnce{rdb: rdb}
	rdb.AddHook(f)
	bad, err := b.Inspector().Check(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if !f.flushed || len(bad) != 1 || bad[0].ID != "ghost" || bad[0].Unconfirmed {
		t.Fatalf("after a SCRIPT FLUSH (flushed: %v), Check answered %v; want ghost, confirmed", f.flushed, bad)
	}
}

func checkBroker(t *testing.T) (*Broker, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := New(rdb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b, rdb
}

// flushOnce is a go-redis hook that flushes the script cache just before
// the first pipeline of EVALSHAs goes out.
type flushOnce struct {
	rdb     *redis.Client
	once    sync.Once
	flushed bool
}

func (f *flushOnce) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (f *flushOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (f *flushOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "evalsha" {
			f.once.Do(func() { f.flushed = f.rdb.ScriptFlush(ctx).Err() == nil })
		}
		return next(ctx, cmds)
	}
}

// The groups Check suspects are read again up to the same cap; the rest
// are reported as the scan saw them, Unconfirmed.
func TestCheckGroupsRecheckCap(t *testing.T) {
	b, rdb := checkBroker(t)
	ctx := context.Background()
	k := b.queueKeys("q")
	for i := range 5 {
		if err := rdb.HSet(ctx, k.grunning(), fmt.Sprintf("g%d", i), 1).Err(); err != nil {
			t.Fatal(err)
		}
	}
	bad, err := b.check(ctx, "q", 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range bad {
		got = append(got, i.String())
	}
	want := []string{
		`group "g0": grunning counts 1 running, but no job of the group is running (a phantom slot)`,
		`group "g1": grunning counts 1 running, but no job of the group is running (a phantom slot)`,
		`group "g2": grunning counts 1 running, but no job of the group is running (a phantom slot) (seen by the scan, not re-read: over CheckRecheckMax)`,
		`group "g3": grunning counts 1 running, but no job of the group is running (a phantom slot) (seen by the scan, not re-read: over CheckRecheckMax)`,
		`group "g4": grunning counts 1 running, but no job of the group is running (a phantom slot) (seen by the scan, not re-read: over CheckRecheckMax)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Check with a cap of 2 answered\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The gready keys are found by a SCAN whose pattern quotes the queue's
// name: a queue named with glob characters reads its own keys only.
func TestCheckGroupsGlobEscaped(t *testing.T) {
	b, rdb := checkBroker(t)
	ctx := context.Background()
	other := b.queueKeys("qa")
	if err := rdb.ZAdd(ctx, other.derived(kindGReady, "acme"), redis.Z{Score: 1, Member: "ghost"}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"q?", "q*", "[q]a"} {
		bad, err := b.Inspector().Check(ctx, q)
		if err != nil || len(bad) > 0 {
			t.Fatalf("Check(%q) answered %v, %v; want nothing of queue qa's keys", q, bad, err)
		}
	}
	bad, err := b.Inspector().Check(ctx, "qa")
	if err != nil || len(bad) != 2 || bad[1].ID != "ghost" || bad[0].Group != "acme" {
		t.Fatalf("Check(qa) answered %v, %v; want its ghost, and acme stuck", bad, err)
	}
}

// A job deleted while pending leaves a tombstone in ready0 with no hash
// behind it. A claim that pops pending jobs between Check's read of ready0
// and its scan of the job hashes makes those entries look like no pending
// job either; Check must not take them for tombstones nobody counted and
// report the deleted job's entry as lost (seen with a live pool, `workerd
// check` right after `workerd delete`).
func TestCheckDeletedPendingBesideAClaim(t *testing.T) {
	b, rdb := checkBroker(t)
	ctx := context.Background()
	for i := range 6 {
		if _, err := b.Client().Enqueue(ctx, Job{Queue: "q", Kind: "k", ID: fmt.Sprintf("j%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Inspector().Delete(ctx, "q", "j5", ""); err != nil {
		t.Fatal(err)
	}
	c := &claimBeforeScan{b: b}
	rdb.AddHook(c)
	bad, err := b.check(ctx, "q", CheckRecheckMax)
	if err != nil {
		t.Fatal(err)
	}
	if c.claimed != 3 {
		t.Fatalf("the hook claimed %d jobs (%v), want 3", c.claimed, c.err)
	}
	if len(bad) != 0 {
		t.Fatalf("Check beside a claim, after a delete, answered %v; want nothing", bad)
	}
}

// claimBeforeScan claims three jobs of queue q just before Check's first
// SCAN, after it has read ready0.
type claimBeforeScan struct {
	b       *Broker
	once    sync.Once
	claimed int
	err     error
}

func (c *claimBeforeScan) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *claimBeforeScan) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (c *claimBeforeScan) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			c.once.Do(func() {
				res, err := c.b.Leases().Claim(ctx, "q", 3, time.Minute)
				c.claimed, c.err = len(res.Leases), err
			})
		}
		return next(ctx, cmd)
	}
}
