package brokertest

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// groupedQueue is a healthy queue that uses groups: jobs of three groups
// and ungrouped ones, running, pending and scheduled, and a hold.
type groupedQueue struct {
	*bundle
	// byHand: the broker filed grouped jobs in the queue's ready index and
	// counted no slot (a version without the groups' core), so the test
	// built the groups' structures as the core leaves them.
	byHand bool
	ack    func(t *testing.T, id string) // acks a running job, freeing its slot
}

// newGroupedQueue enqueues and claims, and checks the structures it may
// read against the contract (or writes them, on a broker without groups):
// running r1, r2 of acme and r3 of globex, and ur ungrouped; pending p1,
// p2 (priority 5) of acme, p3 of ünï (held: ghold's ünï names it), p4 and
// p5 (priority -5) ungrouped; d1 of acme scheduled.
func newGroupedQueue(t *testing.T, nb NewBackend) *groupedQueue {
	t.Helper()
	s := interleaved(t, nb)
	q := &groupedQueue{bundle: s}
	for _, j := range []broker.Job{{ID: "r1", Group: "acme"}, {ID: "r2", Group: "acme"}, {ID: "r3", Group: "globex"}, {ID: "ur"}} {
		s.enqueue(t, j)
	}
	leases := map[string]broker.Lease{}
	for _, l := range s.claim(t, 4, long) {
		leases[l.ID] = l
	}
	want(t, "jobs claimed", len(leases), 4)
	q.ack = func(t *testing.T, id string) {
		_, err := s.b.Leases().Ack(s.ctx, leases[id], nil)
		noErr(t, "Ack", err)
		if q.byHand {
			noErr(t, "HINCRBY", s.Client.HIncrBy(s.ctx, s.queueKey("grunning"), leases[id].Group, -1).Err())
			noErr(t, "HDEL", s.Client.HDel(s.ctx, s.queueKey("grunning"), "globex").Err()) // its only one
		}
	}
	for _, j := range []broker.Job{{ID: "p1", Group: "acme"}, {ID: "p2", Group: "acme", Priority: 5}, {ID: "p3", Group: "ünï"},
		{ID: "p4"}, {ID: "p5", Priority: -5}, {ID: "d1", Group: "acme", Delay: long}} {
		s.enqueue(t, j)
	}
	c, ctx := s.Client, s.ctx
	_, err := c.ZScore(ctx, s.queueKey("gready:acme"), "p1").Result()
	q.byHand = errors.Is(err, redis.Nil)
	if q.byHand {
		for id, g := range map[string]string{"p1": "acme", "p2": "acme", "p3": "ünï"} {
			noErr(t, "LREM", c.LRem(ctx, s.queueKey("ready0"), 0, id).Err())
			noErr(t, "ZREM", c.ZRem(ctx, s.queueKey("ready_hi"), id).Err())
			noErr(t, "ZADD", c.ZAdd(ctx, s.queueKey("gready:"+g), redisZ(1, id)).Err())
			noErr(t, "ZADD", c.ZAddNX(ctx, s.queueKey("grotation"), redisZ(1, g)).Err())
		}
		noErr(t, "ZADD", c.ZAddNX(ctx, s.queueKey("grotation"), redisZ(1, "")).Err())
		noErr(t, "HSET", c.HSet(ctx, s.queueKey("grunning"), "acme", 2, "globex", 1).Err())
		noErr(t, "HSET", c.HSet(ctx, s.queueKey("limits"), "groups", "1").Err())
	} else {
		slots, err := c.HGetAll(ctx, s.queueKey("grunning")).Result()
		noErr(t, "HGETALL grunning", err)
		want(t, "grunning", len(slots), 2)
		want(t, "grunning acme", slots["acme"], "2")
		want(t, "grunning globex", slots["globex"], "1")
	}
	// A hold as an ordered group's retry leaves it (Check reads it only).
	noErr(t, "HSET", c.HSet(ctx, s.queueKey("ghold"), "ünï", "p3").Err())
	return q
}

// Check verifies the groups' structures: invariant 11 (each group's
// grunning counts its running jobs), invariant 6 for the groups' pending
// indexes and no stuck group (G2). Each kind of problem, made
// by hand on a healthy queue, is reported, naming the group, and nothing
// else is; a group whose jobs only moved while Check read is not.
func testCheckGroups(t *testing.T, nb NewBackend) {
	t.Run("HealthyReportsNothing", func(t *testing.T) {
		q := newGroupedQueue(t, nb)
		q.consistent(t)
	})
	t.Run("MovedGroupsAreNotReported", func(t *testing.T) {
		q := newGroupedQueue(t, nb)
		// After the scan counted r3 running, before it reads grunning: r3
		// is done, and its slot free.
		ctx, in := before(q.ctx, "hscan", func() { q.ack(t, "r3") })
		bad, err := q.b.Inspector().Check(ctx, q.q)
		noErr(t, "Check", err)
		want(t, "the seam ran", in.ran, true)
		wantProblems(t, bad, nil)
	})
	t.Run("RealOnesStillAre", func(t *testing.T) {
		q := newGroupedQueue(t, nb)
		noErr(t, "HSET", q.Client.HSet(q.ctx, q.queueKey("grunning"), "ghost", 1).Err())
		ctx, in := before(q.ctx, "hscan", func() { q.ack(t, "r3") })
		bad, err := q.b.Inspector().Check(ctx, q.q)
		noErr(t, "Check", err)
		want(t, "the seam ran", in.ran, true)
		wantProblems(t, bad, map[string]string{
			"group:ghost": `group "ghost": grunning counts 1 running, but no job of the group is running (a phantom slot)`,
		})
	})
	cases := []struct {
		name    string
		breakIt func(q *groupedQueue) error
		want    map[string]string
	}{
		{"PhantomSlot", func(q *groupedQueue) error {
			return q.Client.HSet(q.ctx, q.queueKey("grunning"), "ghost", 1).Err()
		}, map[string]string{
			"group:ghost": `group "ghost": grunning counts 1 running, but no job of the group is running (a phantom slot)`,
		}},
		{"OverCounted", func(q *groupedQueue) error {
			return q.Client.HIncrBy(q.ctx, q.queueKey("grunning"), "acme", 2).Err()
		}, map[string]string{
			"group:acme": `group "acme": grunning counts 4 running, but 2 jobs of the group are running (2 phantom slots)`,
		}},
		{"StartNotCounted", func(q *groupedQueue) error {
			return q.Client.HDel(q.ctx, q.queueKey("grunning"), "globex").Err()
		}, map[string]string{
			"group:globex": `group "globex": grunning counts 0 running, but 1 job of the group is running (starts not counted`,
		}},
		{"NotACount", func(q *groupedQueue) error {
			return q.Client.HSet(q.ctx, q.queueKey("grunning"), "globex", "x").Err()
		}, map[string]string{
			"group:globex": `group "globex": grunning holds "x", not a count`,
		}},
		{"StuckGroup", func(q *groupedQueue) error {
			if err := q.Client.ZRem(q.ctx, q.queueKey("grotation"), "acme").Err(); err != nil {
				return err
			}
			return q.Client.ZRem(q.ctx, q.queueKey("gwait"), "acme").Err()
		}, map[string]string{
			"group:acme": `group "acme": it has pending jobs, but it is in neither grotation nor gwait: no claim will start them (a stuck group)`,
		}},
		{"GroupsFlagOff", func(q *groupedQueue) error {
			return q.Client.HDel(q.ctx, q.queueKey("limits"), "groups").Err()
		}, map[string]string{
			"group:acme": `group "acme": it has pending jobs, but the queue's groups flag is off`,
			"group:ünï":  `group "ünï": it has pending jobs, but the queue's groups flag is off`,
		}},
		{"UngroupedTurnMissing", func(q *groupedQueue) error {
			return q.Client.ZRem(q.ctx, q.queueKey("grotation"), "").Err()
		}, map[string]string{
			"group:": `the ungrouped pending jobs: the queue uses groups, but their turn ("" in grotation) is in neither grotation nor gwait`,
		}},
		{"InAnotherGroupsIndex", func(q *groupedQueue) error {
			if err := q.Client.ZRem(q.ctx, q.queueKey("gready:acme"), "p1").Err(); err != nil {
				return err
			}
			if err := q.Client.ZRem(q.ctx, q.queueKey("grotation"), "globex").Err(); err != nil {
				return err // a spare turn, perhaps, from the claim of its last job
			}
			return q.Client.ZAdd(q.ctx, q.queueKey("gready:globex"), redisZ(1, "p1")).Err()
		}, map[string]string{
			"p1": `job of group "acme" is listed in gready:"globex", another group's`,
			// And globex, which has no other pending job, was in no turn.
			"group:globex": `group "globex": it has pending jobs, but it is in neither grotation nor gwait`,
		}},
		{"AlsoInTheReadyIndex", func(q *groupedQueue) error {
			// (In ready0, its entry would be a tombstone of an earlier
			// job under its id, which the claim skips.)
			return q.Client.ZAdd(q.ctx, q.queueKey("ready_hi"), redisZ(1, "p2")).Err()
		}, map[string]string{
			"p2": `job is pending but listed in 2 indexes: [pending gready:"acme"]`,
		}},
		{"UngroupedInAGroupsIndex", func(q *groupedQueue) error {
			if err := q.Client.LRem(q.ctx, q.queueKey("ready0"), 0, "p4").Err(); err != nil {
				return err
			}
			return q.Client.ZAdd(q.ctx, q.queueKey("gready:acme"), redisZ(1, "p4")).Err()
		}, map[string]string{
			"p4": `job has no group but is listed in gready:"acme"`,
		}},
		{"RunningInAGroupsIndex", func(q *groupedQueue) error {
			// Out of the leases index, too: its group's count still finds it.
			if err := q.Client.ZRem(q.ctx, q.queueKey("leases"), "r1").Err(); err != nil {
				return err
			}
			return q.Client.ZAdd(q.ctx, q.queueKey("gready:acme"), redisZ(1, "r1")).Err()
		}, map[string]string{
			"r1": `job is running but listed in the gready:"acme" index`,
		}},
		{"NoJobHash", func(q *groupedQueue) error {
			return q.Client.ZAdd(q.ctx, q.queueKey("gready:acme"), redisZ(1, "ghost")).Err()
		}, map[string]string{
			"ghost": `listed in [gready:"acme"] but the job hash does not exist`,
		}},
		{"PendingInNoIndex", func(q *groupedQueue) error {
			return q.Client.ZRem(q.ctx, q.queueKey("gready:ünï"), "p3").Err()
		}, map[string]string{
			"p3": `job is pending but in no index (want $BASEgready:ünï, its group's)`,
		}},
		{"StaleHoldsAreNoProblem", func(q *groupedQueue) error {
			// A hold whose job is no longer one of the group's waiting to
			// run: the group's next claim lets it go, as a spare turn.
			return q.Client.HSet(q.ctx, q.queueKey("ghold"), "acme", "r1", "globex", "p1", "zed", "nosuch", "x", "p4").Err()
		}, nil},
		{"PendingIndexOfAnotherType", func(q *groupedQueue) error {
			return q.Client.Set(q.ctx, q.queueKey("gready:bad"), "x", 0).Err()
		}, map[string]string{
			"group:bad": `group "bad": its pending index`,
		}},
		{"FiledBeforeGroupsHadIndexes", func(q *groupedQueue) error {
			// A grouped job in the ready index is how the plumbing step
			// filed it: claimed as an ungrouped job, and no problem.
			if err := q.Client.ZRem(q.ctx, q.queueKey("gready:acme"), "p1").Err(); err != nil {
				return err
			}
			return q.Client.LPush(q.ctx, q.queueKey("ready0"), "p1").Err()
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := newGroupedQueue(t, nb)
			noErr(t, "break it", tc.breakIt(q))
			bad, err := q.b.Inspector().Check(q.ctx, q.q)
			noErr(t, "Check", err)
			for _, b := range bad {
				if b.Unconfirmed {
					t.Errorf("%v is unconfirmed", b)
				}
			}
			w := map[string]string{}
			for id, p := range tc.want {
				w[id] = strings.ReplaceAll(p, "$BASE", q.queueKey(""))
			}
			wantProblems(t, bad, w)
		})
	}
}

// A job of a group under an id that retention freed, whose earlier job
// was cancelled while pending at priority 0, finds that job's entry still
// in ready0 (a tombstone, for the claim to skip). The entry is no filing
// of the new job, which waits in its group's set: a claim does not start
// it from the ungrouped jobs' turn (past its group's limits, and a second
// time from its group's), and Check does not count it as listed there.
// (Found by the model test, seed 13667132708851975432.)
func testGroupedJobBehindATombstone(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	s.enqueue(t, broker.Job{ID: "x"})
	_, err := s.b.Inspector().Cancel(s.ctx, s.q, "x")
	noErr(t, "Cancel", err)
	s.pastHorizon()
	n, err := s.b.Leases().Trim(s.ctx, s.q, broker.Retention{Cancelled: short}, 10)
	noErr(t, "Trim", err)
	want(t, "trimmed", n, 1)
	s.enqueue(t, broker.Job{ID: "y"})
	s.enqueue(t, broker.Job{ID: "x", Group: "acme"})
	s.consistent(t)
	// The ungrouped jobs' turn comes first (the group's first job put it
	// in the rotation, then the group).
	first := s.claimOne(t, long)
	want(t, "the ungrouped turn's job", first.ID, "y")
	want(t, "the group's turn's job", s.claimOne(t, long).ID, "x")
	slots, err := s.Client.HGet(s.ctx, s.queueKey("grunning"), "acme").Result()
	noErr(t, "HGET grunning", err)
	want(t, "acme's slots", slots, "1")
	s.consistent(t)
}
