package brokertest

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// interleave is a go-redis hook that runs a function once, just before the
// first SCAN sent with a context of during's: a seam between Check's read
// of the indexes and its read of the job hashes, where a busy queue moves
// jobs on.
type interleave struct{}

type interleaveKey struct{}

// interleaving is one function the hook runs, before which command, and
// whether it ran.
type interleaving struct {
	once sync.Once
	cmd  string
	fn   func()
	ran  bool
}

// during returns a context whose first SCAN runs fn first.
func during(ctx context.Context, fn func()) (context.Context, *interleaving) {
	return before(ctx, "scan", fn)
}

// before returns a context whose first command named cmd runs fn first.
func before(ctx context.Context, cmd string, fn func()) (context.Context, *interleaving) {
	in := &interleaving{cmd: cmd, fn: fn}
	return context.WithValue(ctx, interleaveKey{}, in), in
}

func (interleave) DialHook(next redis.DialHook) redis.DialHook { return next }

func (interleave) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if in, ok := ctx.Value(interleaveKey{}).(*interleaving); ok && cmd.Name() == in.cmd {
			in.once.Do(func() { in.fn(); in.ran = true })
		}
		return next(ctx, cmd)
	}
}

func (interleave) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// interleaved is setup with the interleave hook on the test's client. On a
// Cluster, Check sends its reads to the queue's node, whose client has
// hooks of its own: the hook goes there too.
func interleaved(t *testing.T, nb NewBackend) *bundle {
	t.Helper()
	be := nb(t)
	be.Client.AddHook(interleave{})
	if cc, ok := be.Client.(*redis.ClusterClient); ok {
		noErr(t, "hook the cluster's masters", cc.ForEachMaster(context.Background(), func(_ context.Context, n *redis.Client) error {
			n.AddHook(interleave{})
			return nil
		}))
	}
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	return s
}

// checkWith runs Check with fn run between its read of the indexes and its
// read of the job hashes, and answers what it reported.
func (s *bundle) checkWith(t *testing.T, fn func()) []broker.Inconsistency {
	t.Helper()
	ctx, in := during(s.ctx, fn)
	bad, err := s.b.Inspector().Check(ctx, s.q)
	noErr(t, "Check", err)
	if !in.ran {
		t.Fatal("Check sent no SCAN: the test's seam missed it")
	}
	return bad
}

// Invariant 6 checked on a queue that moves: `workerd check` at 1,000
// jobs/s reported hundreds of jobs that had only moved on between its read
// of an index and its read of the job hash. Each suspect is read again at
// one instant; only what is still wrong is reported.
func testCheckWhileJobsMove(t *testing.T, nb NewBackend) {
	// moving prepares jobs in every state and answers the legal
	// transitions that take each one to another state, or out of Redis.
	moving := func(t *testing.T, s *bundle) func() {
		s.enqueue(t, broker.Job{ID: "done-then-trimmed"})
		_, err := s.b.Leases().Ack(s.ctx, s.claimOne(t, long), nil)
		noErr(t, "Ack", err)
		s.Advance(past) // finished before the next: retention trims it first
		s.enqueue(t, broker.Job{ID: "running-then-done"})
		running := s.claimOne(t, long)
		s.enqueue(t, broker.Job{ID: "pending-then-running"})
		s.enqueue(t, broker.Job{ID: "pending-then-cancelled", Priority: broker.PriorityMin})
		return func() {
			_, err := s.b.Leases().Ack(s.ctx, running, nil)
			noErr(t, "Ack", err)
			_, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{MaxDone: 1}, 10)
			noErr(t, "Trim", err)
			l := s.claimOne(t, long)
			want(t, "claimed", l.ID, "pending-then-running")
			_, err = s.b.Inspector().Cancel(s.ctx, s.q, "pending-then-cancelled")
			noErr(t, "Cancel", err)
			s.enqueue(t, broker.Job{ID: "enqueued-meanwhile", Delay: long})
		}
	}
	t.Run("MovedJobsAreNotReported", func(t *testing.T) {
		s := interleaved(t, nb)
		if bad := s.checkWith(t, moving(t, s)); len(bad) > 0 {
			t.Fatalf("Check reported jobs that only moved while it read:\n%v", bad)
		}
		s.consistent(t)
	})
	t.Run("RealOnesStillAre", func(t *testing.T) {
		s := interleaved(t, nb)
		twice := s.enqueue(t, broker.Job{ID: "dead-and-scheduled"})
		l := s.claimOne(t, long)
		_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom", Dead: true})
		noErr(t, "Fail", err)
		move := moving(t, s)
		lost := s.enqueue(t, broker.Job{ID: "pending-in-no-index"})
		listed := s.enqueue(t, broker.Job{ID: "pending-in-leases", Priority: broker.PriorityMin})
		// Broken before Check starts (scores no claim or trim reaches)...
		c, ctx, later := s.Client, s.ctx, float64(s.redisTime(t)+long.Milliseconds())
		noErr(t, "LREM", c.LRem(ctx, s.queueKey("ready0"), 0, lost).Err())
		noErr(t, "ZADD", c.ZAdd(ctx, s.queueKey("scheduled"), redisZ(later, twice)).Err())
		noErr(t, "ZADD", c.ZAdd(ctx, s.queueKey("leases"), redisZ(later, listed)).Err())
		noErr(t, "ZADD", c.ZAdd(ctx, s.queueKey("cancelled"), redisZ(1, "no-hash")).Err())
		bad := s.checkWith(t, func() {
			move()
			// ...and broken while it reads: still broken when it looks again.
			noErr(t, "ZREM", c.ZRem(ctx, s.queueKey("scheduled"), "enqueued-meanwhile").Err())
		})
		wantProblems(t, bad, map[string]string{
			lost:                 "job is pending but in no index",
			twice:                "job is dead but listed in 2 indexes",
			listed:               "job is pending but listed in 2 indexes",
			"no-hash":            "listed in [cancelled] but the job hash does not exist",
			"enqueued-meanwhile": "job is scheduled but in no index",
		})
	})
}

// wantProblems fails unless bad holds exactly one problem per id of want,
// each starting with want's text. A problem of a whole group (no ID) goes
// by "group:" and the group's name.
func wantProblems(t *testing.T, bad []broker.Inconsistency, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, b := range bad {
		id := b.ID
		if id == "" {
			id = "group:" + b.Group
		}
		if _, dup := got[id]; dup {
			t.Errorf("%s reported twice: %v", id, bad)
		}
		got[id] = b.Problem
	}
	var ids []string
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if !strings.HasPrefix(got[id], want[id]) {
			t.Errorf("%s: Check said %q, want %q", id, got[id], want[id])
		}
		delete(got, id)
	}
	for id, p := range got {
		t.Errorf("%s: Check said %q, want nothing", id, p)
	}
}
