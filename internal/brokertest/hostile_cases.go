package brokertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// Hostile data and interleavings, found by attacking the scripts on
// purpose: hand-edited fields, a reply lost after the job moved on, a Wait
// caller that gives up at the worst moment, two operators at once. Each
// failed before its fix.

// jobKey is the hash key of job id in the bundle's queue.
func (s *bundle) jobKey(id string) string { return s.b.Prefix() + ":{" + s.q + "}:job:" + id }

// queueKey is one of the bundle's queue keys ("gen", "cascade", ...).
func (s *bundle) queueKey(name string) string { return s.b.Prefix() + ":{" + s.q + "}:" + name }

// One job whose gen field holds a huge (hand-edited, or restored from an
// old backup) value must not poison the queue's generation counter: the
// counter is lifted past it to a value INCR cannot increment, and every
// later script that draws a generation (claim, release, reap, retry)
// aborts half-way — claim after ZPOPMIN, so the jobs it popped are in no
// index any more (invariant 6) and never run.
func testHugeGenPoisonsCounter(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	s.enqueue(t, broker.Job{ID: "a"})
	s.enqueue(t, broker.Job{ID: "b"})
	s.enqueue(t, broker.Job{ID: "c"})
	// The largest integer Redis itself stores in a hash field.
	noErr(t, "corrupt gen", s.Client.HSet(s.ctx, s.jobKey("a"), "gen", "9223372036854775807").Err())

	res, err := s.b.Leases().Claim(s.ctx, s.q, 3, long)
	bad, cerr := s.b.Inspector().Check(s.ctx, s.q)
	noErr(t, "Check", cerr)
	if err != nil || len(bad) > 0 {
		t.Fatalf("one job with a huge gen: Claim answered %v (leases %d); invariant 6 after it: %v", err, len(res.Leases), bad)
	}
	// The queue goes on working for jobs enqueued afterwards.
	s.enqueue(t, broker.Job{ID: "d"})
	res, err = s.b.Leases().Claim(s.ctx, s.q, 10, long)
	noErr(t, "a later Claim", err)
	for _, l := range res.Leases {
		if l.Generation <= 0 {
			t.Errorf("lease %s has generation %d", l.ID, l.Generation)
		}
	}
	s.consistent(t)
}

// A dependent whose blocked_on field is not an integer makes the cascade's
// HINCRBY raise an error in the middle of a step: the step has already
// SPOPped its batch of dependents, so every dependent popped after the bad
// one is dropped from the cascade and stays blocked forever, and the ack
// that finished the parent answers an error although it was stored.
func testCorruptBlockedOnAbortsCascade(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	p := s.enqueue(t, broker.Job{ID: "p"})
	const n = 20
	for i := range n {
		s.enqueue(t, broker.Job{ID: fmt.Sprintf("c%02d", i), DependsOn: []string{p}})
	}
	noErr(t, "corrupt blocked_on", s.Client.HSet(s.ctx, s.jobKey("c07"), "blocked_on", "x").Err())

	l := s.claimOne(t, long)
	o, err := s.b.Leases().Ack(s.ctx, l, nil)
	if err != nil {
		t.Errorf("Ack of the parent: %v (the job is stored as done: %s)", err, s.job(t, p).State)
	} else {
		want(t, "Ack of the parent", o, broker.OK)
	}
	s.settleCascade(t)
	var stuck []string
	for i := range n {
		id := fmt.Sprintf("c%02d", i)
		if id == "c07" {
			continue
		}
		if st := s.job(t, id).State; st != broker.StatePending {
			stuck = append(stuck, id+" "+string(st))
		}
	}
	if len(stuck) > 0 {
		t.Errorf("dependents with a sound hash left behind by one corrupt sibling: %v", stuck)
	}
	if st := s.job(t, "c07").State; st == broker.StateBlocked {
		t.Errorf("the corrupt dependent is still blocked, with nothing left to release it; want it marked dead with the reason (as claim does)")
	}
	s.consistent(t)
}

// A cascade entry whose set of dependents is not a set (a hand-edited
// key) raises WRONGTYPE from SPOP at the head of the cascade, which every
// claim and every reap steps first: the whole queue stops, forever.
func testCascadeEntryWrongTypeWedgesQueue(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	noErr(t, "corrupt cascade entry", s.Client.RPush(s.ctx, s.queueKey("cascade"), "424242:done:gone").Err())
	noErr(t, "corrupt cascade set", s.Client.Set(s.ctx, s.queueKey("cascade:424242"), "not a set", 0).Err())
	id := s.enqueue(t, broker.Job{})

	res, err := s.b.Leases().Claim(s.ctx, s.q, 1, long)
	if err != nil {
		t.Errorf("Claim with a corrupt cascade entry ahead: %v", err)
	} else if len(res.Leases) != 1 || res.Leases[0].ID != id {
		t.Errorf("Claim took %+v, want job %s", res.Leases, id)
	}
	if _, err := s.b.Leases().Reap(s.ctx, s.q, 10); err != nil {
		t.Errorf("Reap with a corrupt cascade entry ahead: %v", err)
	}
	if _, err := s.b.Leases().Claim(s.ctx, s.q, 1, long); err != nil {
		t.Errorf("a second Claim: %v (the entry is never moved aside, so the queue stays wedged)", err)
	}
}

// A depends_on field that is a JSON list of something other than ids (a
// null, a number list edited by hand) makes retry.lua raise a Lua error
// instead of answering 'refused': Retry answers a raw script error, and
// since RetryDead takes the oldest dead jobs first and runs them in one
// script, one such job makes every RetryDead of the queue fail, retrying
// none of the sound jobs behind it.
func testCorruptDependsOnAbortsRetry(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	// bad dies first (it is the oldest in dead), then good.
	for _, id := range []string{"bad", "good"} {
		s.enqueue(t, broker.Job{ID: id, MaxAttempts: 1})
		_, err := s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: "boom", Dead: true})
		noErr(t, "Fail", err)
		s.Advance(2 * time.Millisecond)
	}
	noErr(t, "corrupt depends_on", s.Client.HSet(s.ctx, s.jobKey("bad"), "depends_on", `[["x"]]`, "blocked_on", "1").Err())

	_, err := s.b.Inspector().Retry(s.ctx, s.q, "bad")
	if err == nil || !strings.Contains(err.Error(), "depends_on") {
		t.Errorf("Retry of a job whose depends_on is [[\"x\"]]: %v; want a refusal that names depends_on", err)
	}
	n, err := s.b.Inspector().RetryDead(s.ctx, s.q, 10)
	if err != nil || n != 1 {
		t.Errorf("RetryDead with one corrupt job among two: sent %d back, error %v; want 1 (the sound one), no error", n, err)
	}
	want(t, "the sound dead job after RetryDead", s.job(t, "good").State, broker.StatePending)
	s.consistent(t)
}

// Invariant 9 says a re-sent release, fail or snooze answers what the
// first call did. When the first call made the job pending (release; fail
// or snooze with no backoff), another worker may claim it before the
// re-send arrives — for a release at shutdown within about a millisecond.
// The re-send then answers Stale, and the worker logs "stale settlement
// rejected: the job was taken over while its handler ran", although its
// own settlement was stored.
func testResendAfterReclaim(t *testing.T, nb NewBackend) {
	cases := []struct {
		name string
		op   func(s *bundle, l broker.Lease) (broker.Settled, error)
	}{
		{"Release", func(s *bundle, l broker.Lease) (broker.Settled, error) {
			return s.b.Leases().Release(s.ctx, l)
		}},
		{"FailNoBackoff", func(s *bundle, l broker.Lease) (broker.Settled, error) {
			return s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom"})
		}},
		{"SnoozeZero", func(s *bundle, l broker.Lease) (broker.Settled, error) {
			return s.b.Leases().Snooze(s.ctx, l, 0)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := setup(t, nb)
			s.enqueue(t, broker.Job{MaxAttempts: 5})
			first := s.claimOne(t, long)
			got, err := tc.op(s, first) // its reply is lost
			o, st := got.Outcome, got.State
			noErr(t, tc.name, err)
			want(t, "first answer", o, broker.OK)
			want(t, "first state", st, broker.StatePending)
			s.claimOne(t, long)        // another worker takes the job at once
			got, err = tc.op(s, first) // the identical request, sent again
			o, st = got.Outcome, got.State
			noErr(t, tc.name+" sent again", err)
			if o != broker.OK || st != broker.StatePending {
				t.Fatalf("%s sent again after another worker claimed the job answered %v %q; the first answered ok %q",
					tc.name, o, st, broker.StatePending)
			}
		})
	}
}

// finish() leaves one wake-up for the callers of Wait and each caller it
// wakes passes it on. A caller whose context is cancelled (not a deadline:
// go-redis does not interrupt a blocking read for a cancel) while it is
// blocked in BLPOP still takes the wake-up when the job finishes, then
// returns ctx's error without passing it on: every other caller of Wait
// for that job sleeps until its 30 s recheck.
// Deterministic on a real Redis, which serves blocked clients first come
// first served; miniredis picks a blocked client at random, so there it
// fails about half the time.
func testWaitWakeupLostToCancelledCaller(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{})
	l := s.claimOne(t, long)

	// The first caller blocks first, so Redis serves it first.
	ctx1, cancel1 := context.WithCancel(s.ctx)
	first := make(chan error, 1)
	go func() {
		_, err := s.b.Client().Wait(ctx1, s.q, id)
		first <- err
	}()
	s.waitedOn(t, id)
	time.Sleep(50 * time.Millisecond) // into its BLPOP
	second := make(chan error, 1)
	go func() {
		_, err := s.b.Client().Wait(s.ctx, s.q, id)
		second <- err
	}()
	time.Sleep(50 * time.Millisecond) // into its BLPOP, behind the first

	cancel1() // the first caller gives up while blocked
	_, err := s.b.Leases().Ack(s.ctx, l, nil)
	noErr(t, "Ack", err)
	select {
	case err := <-first:
		if err == nil {
			t.Log("the cancelled caller returned the job")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled caller did not return")
	}
	select {
	case err := <-second:
		noErr(t, "the other caller of Wait", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the job is done, but the other caller of Wait is still blocked 5s later: the wake-up went to the caller that gave up and was not passed on")
	}
}

// Two operators who change different limits at the same time, each with
// the call for its own limit, both get theirs (a read-modify-write of
// SetLimits lost one of them).
func testLimitsLostUpdate(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	noErr(t, "SetMaxRunning by A", s.b.Inspector().SetMaxRunning(s.ctx, s.q, 5))
	noErr(t, "SetRate by B", s.b.Inspector().SetRate(s.ctx, s.q, 10, time.Second))
	got, err := s.b.Inspector().Limits(s.ctx, s.q)
	noErr(t, "Limits", err)
	if w := (broker.Limits{MaxRunning: 5, Rate: 10, Per: time.Second}); got != w {
		t.Fatalf("two operators changed one limit each; the queue has %+v, want %+v", got, w)
	}
}

// Two operators at once, one changing the rate and the other only the
// period (a limits form, workerd limit --per): ChangeLimits changes what it
// names inside Redis and keeps the rest as it finds it there, so neither
// change is lost whichever lands first; a change it refuses writes nothing.
func testChangeLimitsKeepsWhatItDoesNotName(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{MaxRunning: 5, Rate: 100, Per: time.Second}))
	noErr(t, "SetRate by B", s.b.Inspector().SetRate(s.ctx, s.q, 200, time.Second)) // lands while A's form is on its way
	got, err := s.b.Inspector().ChangeLimits(s.ctx, s.q, broker.LimitsChange{To: broker.Limits{Per: time.Minute}, Per: true})
	noErr(t, "ChangeLimits of the period by A", err)
	want(t, "limits after A changed the period only", got, broker.Limits{MaxRunning: 5, Rate: 200, Per: time.Minute})
	got, err = s.b.Inspector().ChangeLimits(s.ctx, s.q, broker.LimitsChange{To: broker.Limits{Rate: 7}, Rate: true})
	noErr(t, "ChangeLimits of the rate", err)
	want(t, "limits after the rate alone changed", got, broker.Limits{MaxRunning: 5, Rate: 7, Per: time.Minute})
	got, err = s.b.Inspector().ChangeLimits(s.ctx, s.q, broker.LimitsChange{To: broker.Limits{Per: time.Hour}, Rate: true, Per: true})
	noErr(t, "ChangeLimits removing the rate", err)
	want(t, "limits after the rate was removed", got, broker.Limits{MaxRunning: 5})
	for _, c := range []broker.LimitsChange{
		{To: broker.Limits{MaxRunning: 9, Per: time.Second}, MaxRunning: true, Per: true}, // a period, and no rate
		{To: broker.Limits{MaxRunning: 9, Rate: 3}, MaxRunning: true, Rate: true},         // a rate, and no period
		{To: broker.Limits{Per: time.Microsecond}, Per: true},
	} {
		_, err := s.b.Inspector().ChangeLimits(s.ctx, s.q, c)
		want(t, fmt.Sprintf("ChangeLimits(%+v) is refused", c), errors.Is(err, broker.ErrInvalid), true)
	}
	l, err := s.b.Inspector().Limits(s.ctx, s.q)
	noErr(t, "Limits", err)
	want(t, "limits after refused changes", l, broker.Limits{MaxRunning: 5})
	got, err = s.b.Inspector().ChangeLimits(s.ctx, s.q, broker.LimitsChange{To: broker.Limits{MaxRunning: 0}, MaxRunning: true})
	noErr(t, "ChangeLimits removing max running", err)
	want(t, "limits after max running was removed", got, broker.Limits{})
	n, err := s.Client.Exists(s.ctx, s.queueKey("limits")).Result()
	noErr(t, "EXISTS limits", err)
	want(t, "limits hash left once every limit is removed", n, int64(0))
}

// Invariant 7 rests on Lease.LocalDeadline: "the local time before which
// the lease is certainly still held". ClaimRequest computes it as the time
// the request was sent plus the lease duration — right for a first claim,
// wrong for a re-send. A re-send (the pool re-sends for up to half a
// lease) answers the leases the first call took, whose lease_until was
// fixed by the first call; the re-send's own send time plus a full lease
// overstates it by however long the re-send came after. A pool whose
// renewals then fail keeps the handler running past the real expiry, while
// a reaper elsewhere hands the job to another worker.
func testResentClaimOverstatesLocalDeadline(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	s.enqueue(t, broker.Job{})
	const lease = time.Second
	req := broker.NewRequestID()
	first, err := s.b.Leases().ClaimRequest(s.ctx, req, s.q, 1, lease) // its reply is lost
	noErr(t, "ClaimRequest", err)
	want(t, "leases of the first claim", len(first.Leases), 1)

	s.Advance(600 * time.Millisecond) // the pool re-sends within half a lease
	again, err := s.b.Leases().ClaimRequest(s.ctx, req, s.q, 1, lease)
	noErr(t, "ClaimRequest sent again", err)
	want(t, "leases of the re-send", len(again.Leases), 1)
	l := again.Leases[0]
	want(t, "token of the re-sent lease", l.ClaimID(), first.Leases[0].ClaimID())
	want(t, "Redis deadline of the re-sent lease", l.Deadline.Equal(first.Leases[0].Deadline), true)

	redisNow, err := s.Client.Time(s.ctx).Result()
	noErr(t, "TIME", err)
	heldFor := l.Deadline.Sub(redisNow)     // what Redis still grants the lease
	believed := time.Until(l.LocalDeadline) // what the worker will assume
	if believed > heldFor+200*time.Millisecond {
		t.Fatalf("re-sent ClaimRequest: LocalDeadline is %v away, but the lease expires on Redis in %v; "+
			"a worker trusting LocalDeadline runs the handler up to %v past its lease", believed.Round(time.Millisecond),
			heldFor.Round(time.Millisecond), (believed - heldFor).Round(time.Millisecond))
	}
}

// The re-send record of a settlement survives later claims (lib.lua's
// PREV_SETTLED), but claim copies it from the previous claim only: when
// the claim in between never settled (its worker died and the reaper took
// the job, or an operator force-released it), the next claim overwrites
// the record with nothing. A release or fail re-sent after that answers
// Stale although it was stored (invariant 9).
func testResendAfterUnsettledReclaim(t *testing.T, nb NewBackend) {
	for _, via := range []string{"Reap", "ReleaseUnowned"} {
		t.Run(via, func(t *testing.T) {
			s := setup(t, nb)
			id := s.enqueue(t, broker.Job{MaxAttempts: 5})
			first := s.claimOne(t, long)
			got, err := s.b.Leases().Release(s.ctx, first) // its reply is lost
			o, st := got.Outcome, got.State
			noErr(t, "Release", err)
			want(t, "first answer", o, broker.OK)
			want(t, "first state", st, broker.StatePending)

			// A second worker claims the job and dies (or an operator takes it back).
			if via == "Reap" {
				s.claimOne(t, short)
				s.Advance(past)
				want(t, "reaped", len(s.reap(t, 10).Reaped), 1)
			} else {
				s.claimOne(t, long)
				_, err := s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id)
				noErr(t, "ReleaseUnowned", err)
			}
			s.claimOne(t, long) // a third worker runs it

			got, err = s.b.Leases().Release(s.ctx, first) // the identical request, sent again
			o, st = got.Outcome, got.State
			noErr(t, "Release sent again", err)
			if o != broker.OK || st != broker.StatePending {
				t.Fatalf("Release sent again after an unsettled claim (%s) and another claim answered %v %q; the first answered ok %q",
					via, o, st, broker.StatePending)
			}
		})
	}
}

// An operator's Retry clears the job's token and settlement record without
// moving them aside: a worker's fail whose reply was lost, re-sent after
// an operator retried the dead job, answers Stale although the failure
// was stored (invariant 9: a lost reply never makes a settlement look
// stale).
func testResendAfterOperatorRetry(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{MaxAttempts: 3})
	l := s.claimOne(t, long)
	f := broker.Failure{Error: "permanent", Dead: true}
	got, err := s.b.Leases().Fail(s.ctx, l, f) // its reply is lost
	o, st := got.Outcome, got.State
	noErr(t, "Fail", err)
	want(t, "first answer", o, broker.OK)
	want(t, "first state", st, broker.StateDead)

	_, err = s.b.Inspector().Retry(s.ctx, s.q, id) // an operator sends it back at once
	noErr(t, "Retry", err)

	got, err = s.b.Leases().Fail(s.ctx, l, f) // the identical request, sent again
	o, st = got.Outcome, got.State
	noErr(t, "Fail sent again", err)
	if o != broker.OK || st != broker.StateDead {
		t.Fatalf("Fail sent again after an operator retried the job answered %v %q; the first answered ok %q", o, st, broker.StateDead)
	}
}

// A job whose gen is above the queue's counter (written before the counter
// existed, or restored from a backup) gets a generation above its own, and
// the jobs claimed after it in the same batch get ones above that: a
// generation is never issued twice (invariants 3 and 10).
func testGenAboveCounter(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	a := s.enqueue(t, broker.Job{})
	b := s.enqueue(t, broker.Job{})
	noErr(t, "HSET gen", s.Client.HSet(s.ctx, s.jobKey(a), "gen", 1000).Err())
	ls := s.claim(t, 2, long)
	want(t, "claimed", len(ls), 2)
	want(t, "first claimed", ls[0].ID, a)
	want(t, "second claimed", ls[1].ID, b)
	if ls[0].Generation <= 1000 || ls[1].Generation <= ls[0].Generation {
		t.Fatalf("generations %d (job at 1000) and %d: want above 1000, then above that", ls[0].Generation, ls[1].Generation)
	}
	s.consistent(t)
}

// A settlement that claims in the same call (FusedFail, FusedSnooze) may
// take back the very job it settled. Its re-send then finds the job under
// its own new claim, and resettled reads the settlement's record one claim
// back. When the first send was itself a re-send that found the record one
// claim back already (another worker took the job and released it in
// between), its own claim pushed the record two claims back: the second
// re-send of the identical request answered Stale (the model found this:
// testdata/rapid/TestMiniredis_Model/…-7918.fail).
func testResendClaimThatTookItsOwnJob(t *testing.T, nb NewBackend) {
	for _, tc := range settleAgain {
		t.Run("Fused"+tc.name, func(t *testing.T) {
			s := setup(t, nb)
			first := settledThenGivenBack(t, s, tc.name, tc.plain)

			// The worker sends its settlement again, now with a claim that
			// takes the job once more; this reply is lost too.
			spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 1, Lease: long}
			fused, err := tc.fused(s, first, spec)
			o, st, res := fused.Outcome, fused.State, fused.Claim
			noErr(t, tc.name+" sent again", err)
			want(t, "second answer", o, broker.OK)
			want(t, "second state", st, broker.StatePending)
			want(t, "jobs the second send took", len(res.Leases), 1)

			fused, err = tc.fused(s, first, spec) // the identical request, a third time
			o, st, again := fused.Outcome, fused.State, fused.Claim
			noErr(t, tc.name+" sent a third time", err)
			if o != broker.OK || st != broker.StatePending {
				t.Fatalf("Fused%s sent again after its own claim took the job answered %v %q; the first send of this request answered ok %q",
					tc.name, o, st, broker.StatePending)
			}
			if len(again.Leases) != 1 || again.Leases[0].ClaimID() != res.Leases[0].ClaimID() {
				t.Fatalf("Fused%s sent again answered leases %v, want the same lease as its first send", tc.name, again.Leases)
			}
			s.consistent(t)
		})
	}
}

// settleAgain are the settlements that may leave a job pending at once,
// as the pool sends them: alone (plain), and with a claim after them
// (fused), for the re-send cases below.
var settleAgain = []struct {
	name  string
	plain func(s *bundle, l broker.Lease) (broker.Settled, error)
	fused func(s *bundle, l broker.Lease, c broker.ClaimSpec) (broker.Fused, error)
}{
	{"Snooze",
		func(s *bundle, l broker.Lease) (broker.Settled, error) {
			return s.b.Leases().Snooze(s.ctx, l, 0)
		},
		func(s *bundle, l broker.Lease, c broker.ClaimSpec) (broker.Fused, error) {
			return s.b.Leases().FusedSnooze(s.ctx, l, 0, c)
		}},
	{"Fail",
		func(s *bundle, l broker.Lease) (broker.Settled, error) {
			return s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom"})
		},
		func(s *bundle, l broker.Lease, c broker.ClaimSpec) (broker.Fused, error) {
			return s.b.Leases().FusedFail(s.ctx, l, broker.Failure{Error: "boom"}, c)
		}},
}

// settledThenGivenBack enqueues a job, claims it and settles that claim
// with plain, whose reply is lost (it answers ok, pending), and then lets
// another worker claim the job and give it back: the start of every case
// whose re-send finds its record more than one claim back. It answers the
// first claim.
func settledThenGivenBack(t *testing.T, s *bundle, name string,
	plain func(s *bundle, l broker.Lease) (broker.Settled, error)) broker.Lease {
	t.Helper()
	s.enqueue(t, broker.Job{MaxAttempts: 5})
	first := s.claimOne(t, long)
	got, err := plain(s, first) // its reply is lost
	o, st := got.Outcome, got.State
	noErr(t, name, err)
	want(t, "first answer", o, broker.OK)
	want(t, "first state", st, broker.StatePending)

	other := s.claimOne(t, long) // another worker takes the job and gives it back
	got, err = s.b.Leases().Release(s.ctx, other)
	o = got.Outcome
	noErr(t, "Release", err)
	want(t, "the other worker's release", o, broker.OK)
	return first
}

// A hand-edited meta field that take.lua's bad_meta lets through must
// still decode in Go: otherwise the claim that popped it answers an error
// for the whole batch (every other job it leased is lost to the caller
// until the reaper takes it back, an attempt charged), and the same job
// fails the next claim that pops it. bad_meta (cjson) and decodeMetadata
// (encoding/json) disagree about a key given twice, the first time with a
// value that is not a string: cjson keeps the last, a string, and
// encoding/json refuses the first; and real Redis's cjson took a raw
// control character inside a string, which encoding/json (and so
// miniredis's cjson) refuses. The first is handed out without its
// metadata and reported; bad_meta now refuses the second, on both.
func testCorruptMetaPassesLuaFailsGo(t *testing.T, nb NewBackend) {
	for name, tc := range map[string]struct {
		meta string
		dead bool // bad_meta refuses it: marked dead; else handed out without metadata
	}{
		"DuplicateKey":  {`{"a":1,"a":"x"}`, false},
		"RawTabInValue": {"{\"a\":\"x\ty\"}", true},
		// The tab comes after an escaped quote: still inside the string.
		"RawTabAfterEscapedQuote": {"{\"a\":\"x\\\"\ty\"}", true},
	} {
		t.Run(name, func(t *testing.T) {
			s := setup(t, nb)
			good := s.enqueue(t, broker.Job{ID: "good", Metadata: map[string]string{"tenant": "acme"}})
			bad := s.enqueue(t, broker.Job{ID: "bad", Metadata: map[string]string{"tenant": "acme"}})
			key := s.b.Prefix() + ":{" + s.q + "}:job:" + bad
			noErr(t, "corrupt", s.Client.HSet(s.ctx, key, "meta", tc.meta).Err())
			res, err := s.b.Leases().Claim(s.ctx, s.q, 10, long)
			if err != nil {
				t.Fatalf("Claim with a job whose meta field is %q: %v; want the good job claimed", tc.meta, err)
			}
			if len(res.Problems) != 1 || res.Problems[0].ID != bad || !strings.Contains(res.Problems[0].Reason, "field meta") {
				t.Fatalf("claim's problems %+v, want one naming %s's field meta", res.Problems, bad)
			}
			leases := map[string]broker.Lease{}
			for _, l := range res.Leases {
				leases[l.ID] = l
			}
			if l, ok := leases[good]; !ok || l.Metadata["tenant"] != "acme" {
				t.Fatalf("claimed %+v, want %s with its metadata", res.Leases, good)
			}
			if tc.dead {
				if _, ok := leases[bad]; ok || len(leases) != 1 {
					t.Fatalf("claimed %+v, want only %s", res.Leases, good)
				}
				if j := s.job(t, bad); j.State != broker.StateDead || !strings.Contains(j.LastError, "field meta") {
					t.Fatalf("job %s: state %s, last error %q; want dead with the reason", bad, j.State, j.LastError)
				}
			} else if l, ok := leases[bad]; !ok || l.Metadata != nil {
				t.Fatalf("claimed %+v, want %s handed out without its metadata", res.Leases, bad)
			}
			s.consistent(t)
		})
	}
}

// What the pool does after a fused settlement's lost reply (worker
// fusedSettle): it asks for the fused claim again under its request id
// (reask), starts the job that claim took, and then, since its slot is
// passed on, sends the settlement again plain. When the fused send was
// itself the re-send of a plain settlement whose reply was lost, and
// another worker took the job and gave it back in between, the fused
// send's own claim takes the job back and the settlement's record is two
// claims back: the plain re-send answered Stale for a settlement Redis
// applied (the pool logged "lease lost" for a job it failed; invariant 9),
// when a job kept the record of one earlier claim only.
func testWorkerResendAfterFusedClaimTookItsOwnJob(t *testing.T, nb NewBackend) {
	for _, tc := range settleAgain {
		t.Run(tc.name, func(t *testing.T) {
			s := setup(t, nb)
			first := settledThenGivenBack(t, s, tc.name, tc.plain)

			// The pool's retry: the settlement fused with a claim under a
			// new request id; this reply is lost too.
			spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 1, Lease: long}
			fused, err := tc.fused(s, first, spec)
			o, st, res := fused.Outcome, fused.State, fused.Claim
			noErr(t, "Fused"+tc.name, err)
			want(t, "fused answer", o, broker.OK)
			want(t, "fused state", st, broker.StatePending)
			want(t, "jobs the fused send took", len(res.Leases), 1)
			// reask: the claim again under its id; the pool starts its job.
			again, err := s.b.Leases().ClaimRequest(s.ctx, spec.RequestID, s.q, 1, long)
			noErr(t, "ClaimRequest (reask)", err)
			want(t, "jobs the reask answered", len(again.Leases), 1)
			// Its slot passed on, the pool sends the settlement plain.
			got, err := tc.plain(s, first)
			o, st = got.Outcome, got.State
			noErr(t, tc.name+" sent again", err)
			if o != broker.OK || st != broker.StatePending {
				t.Fatalf("%s sent again (plain, after the fused send's claim took the job) answered %v %q; Redis applied it: want ok %q",
					tc.name, o, st, broker.StatePending)
			}
			want(t, "the job's claim after the re-send", s.job(t, res.Leases[0].ID).ClaimID, res.Leases[0].ClaimID())
			s.consistent(t)
		})
	}
}

// A meta field that encoding/json decodes must be handed out with its
// metadata, whatever its layout: JSON lets whitespace (tab, newline,
// carriage return) stand between tokens, as a hand-edited or
// pretty-printed field has it. bad_meta's raw-control-character check
// (meant for one inside a string, which Go refuses) refuses these too, and
// the claim makes a job whose metadata Go reads fine dead.
func testPrettyMetaIsHandedOut(t *testing.T, nb NewBackend) {
	for _, meta := range []string{
		"{\n\t\"tenant\": \"acme\"\r\n}",
		// The string ends in an escaped backslash; the newline after it
		// is between tokens.
		"{\"tenant\":\"acme\\\\\"\n}",
	} {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{ID: "pretty", Metadata: map[string]string{"tenant": "acme"}})
		noErr(t, "hand-edit meta", s.Client.HSet(s.ctx, s.jobKey(id), "meta", meta).Err())
		res, err := s.b.Leases().Claim(s.ctx, s.q, 1, long)
		noErr(t, "Claim", err)
		if len(res.Leases) != 1 || !strings.HasPrefix(res.Leases[0].Metadata["tenant"], "acme") || len(res.Problems) != 0 {
			j := s.job(t, id)
			t.Fatalf("claim of a job whose meta field is %q (valid JSON, encoding/json reads it) answered leases %+v, problems %+v (job %s, last error %q); want it handed out with its metadata",
				meta, res.Leases, res.Problems, j.State, j.LastError)
		}
		s.consistent(t)
	}
}

// The sequence of WorkerResendAfterFusedClaimTookItsOwnJob with the pool's
// own short lease, and Redis unreachable for longer than it while the pool
// keeps re-sending the failure (worker retry has no bound but Shutdown):
// the re-send must not depend on anything that expires with the lease.
// (It once read an answer kept in the fused call's claim record, which
// expires with the lease, and then answered Stale.)
func testFusedResendAfterLeaseExpired(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	f := broker.Failure{Error: "boom"}
	first := settledThenGivenBack(t, s, "Fail", func(s *bundle, l broker.Lease) (broker.Settled, error) {
		return s.b.Leases().Fail(s.ctx, l, f)
	})

	// The pool's fused retry, with the pool's (short) lease; reply lost.
	spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 1, Lease: short}
	fused, err := s.b.Leases().FusedFail(s.ctx, first, f, spec)
	o, st, res := fused.Outcome, fused.State, fused.Claim
	noErr(t, "FusedFail", err)
	want(t, "fused answer", o, broker.OK)
	want(t, "fused state", st, broker.StatePending)
	want(t, "jobs the fused send took", len(res.Leases), 1)
	again, err := s.b.Leases().ClaimRequest(s.ctx, spec.RequestID, s.q, 1, short) // reask
	noErr(t, "ClaimRequest (reask)", err)
	want(t, "jobs the reask answered", len(again.Leases), 1)

	// Redis stays unreachable for longer than the lease; the pool keeps
	// re-sending the failure, plain.
	s.Advance(3 * short)
	got, err := s.b.Leases().Fail(s.ctx, first, f)
	o, st = got.Outcome, got.State
	noErr(t, "Fail sent again", err)
	if o != broker.OK || st != broker.StatePending {
		t.Fatalf("Fail sent again after the fused call's lease expired answered %v %q; Redis applied the failure: want ok %q",
			o, st, broker.StatePending)
	}
	s.consistent(t)
}

// The pool's sequence of WorkerResendAfterFusedClaimTookItsOwnJob, but the
// fused send fails before it reaches Redis (a pool timeout, a broken
// connection) instead of losing its reply: the pool cannot tell the two
// apart. Its reask (ClaimRequest under the fused call's id) then makes the
// claim itself and takes the job back, and the plain re-send must still
// find the settlement's record, two claims back (invariant 9).
func testWorkerResendAfterReaskTookItsOwnJob(t *testing.T, nb NewBackend) {
	for _, tc := range settleAgain {
		t.Run(tc.name, func(t *testing.T) {
			s := setup(t, nb)
			first := settledThenGivenBack(t, s, tc.name, tc.plain)

			// The pool's retry, fused with a claim under a new request id,
			// fails before Redis runs it. reask: the claim under its id,
			// which takes the job back; the pool starts it.
			spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 1, Lease: long}
			again, err := s.b.Leases().ClaimRequest(s.ctx, spec.RequestID, s.q, 1, long)
			noErr(t, "ClaimRequest (reask)", err)
			want(t, "jobs the reask took", len(again.Leases), 1)
			// The settlement again, plain.
			got, err := tc.plain(s, first)
			o, st := got.Outcome, got.State
			noErr(t, tc.name+" sent again", err)
			if o != broker.OK || st != broker.StatePending {
				t.Fatalf("%s sent again (after the reask took the job back) answered %v %q; Redis applied it: want ok %q",
					tc.name, o, st, broker.StatePending)
			}
			s.consistent(t)
		})
	}
}

// A claim request id says nothing about whose settlement a call is: a
// FusedFail under an id already used, for another job's valid lease,
// settles that lease. (A fail.lua that answered from an answer kept under
// the request id, as one did for a while, answered OK and applied nothing:
// the job stayed running until its lease expired and the reaper charged it.)
func testUsedRequestIDSettlesItsOwnLease(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	s.enqueue(t, broker.Job{ID: "a", MaxAttempts: 5})
	s.enqueue(t, broker.Job{ID: "b", MaxAttempts: 5})
	ls := s.claim(t, 2, long)
	f := broker.Failure{Error: "boom", Backoff: time.Hour}
	spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 1, Lease: long}
	fused, err := s.b.Leases().FusedFail(s.ctx, ls[0], f, spec)
	o, st := fused.Outcome, fused.State
	noErr(t, "FusedFail", err)
	want(t, "first answer", o, broker.OK)
	want(t, "first state", st, broker.StateScheduled)

	fused, err = s.b.Leases().FusedFail(s.ctx, ls[1], f, broker.ClaimSpec{RequestID: spec.RequestID, Queue: s.q, Lease: long})
	o, st = fused.Outcome, fused.State
	noErr(t, "FusedFail of the other lease", err)
	if j := s.job(t, ls[1].ID); o == broker.OK && j.State != broker.StateScheduled {
		t.Fatalf("FusedFail (N = 0) of job %s's valid lease under a request id used for job %s answered %v %q, but job %s is %s: the failure was not applied",
			ls[1].ID, ls[0].ID, o, st, ls[1].ID, j.State)
	}
	s.consistent(t)
}

// A job keeps the settlement records of its last three claims (lib.lua's
// PREV_SETTLED): a release whose reply was lost, re-sent after three more
// claims of the job (two other workers took it and gave it back, a third
// holds it), answers what it did the first time.
func testResendAfterThreeLaterClaims(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	s.enqueue(t, broker.Job{MaxAttempts: 5})
	first := s.claimOne(t, long)
	got, err := s.b.Leases().Release(s.ctx, first) // its reply is lost
	o, st := got.Outcome, got.State
	noErr(t, "Release", err)
	want(t, "first answer", o, broker.OK)
	for i := range 2 {
		got, err := s.b.Leases().Release(s.ctx, s.claimOne(t, long))
		o := got.Outcome
		noErr(t, "another worker's Release", err)
		want(t, fmt.Sprintf("worker %d's release", i+2), o, broker.OK)
	}
	s.claimOne(t, long) // a fourth worker runs it
	got, err = s.b.Leases().Release(s.ctx, first)
	o, st2 := got.Outcome, got.State
	noErr(t, "Release sent again", err)
	if o != broker.OK || st2 != st {
		t.Fatalf("Release sent again after three later claims answered %v %q; the first answered ok %q", o, st2, st)
	}
	s.consistent(t)
}
