package brokertest

import (
	"context"
	"errors"
	"math"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// dropReplies is a go-redis hook that loses replies the way a read timeout
// does: for a request sent with a context from dropping, the command (or
// pipeline) runs on Redis, and its caller gets an i/o timeout instead of
// the reply, as long as the context's budget of drops lasts. The broker
// itself must then learn the answer (invariant 9's re-send), not its
// caller.
type dropReplies struct{}

type dropKey struct{}

// dropping gives ctx a budget of n lost replies, shared by every request
// sent with it; n < 0 loses every reply.
func dropping(ctx context.Context, n int) context.Context {
	left := &atomic.Int64{}
	left.Store(int64(n))
	if n < 0 {
		left.Store(math.MaxInt64)
	}
	return context.WithValue(ctx, dropKey{}, left)
}

// errReplyLost is what a client whose read deadline passed answers.
var errReplyLost = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

// drop reports whether this reply is to be lost, taking it from ctx's budget.
func drop(ctx context.Context) bool {
	left, _ := ctx.Value(dropKey{}).(*atomic.Int64)
	return left != nil && left.Add(-1) >= 0
}

func (dropReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (dropReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && drop(ctx) {
			cmd.SetErr(errReplyLost)
			return errReplyLost
		}
		return err
	}
}

func (dropReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil && drop(ctx) {
			for _, c := range cmds {
				c.SetErr(errReplyLost)
			}
			return errReplyLost
		}
		return err
	}
}

// The broker sends a request whose reply was lost again itself (invariant
// 9), so its caller never sees a failure for work Redis did: a claim
// answers its leases (a job of one attempt is not left to be reaped dead),
// an enqueue its jobs, a retry, cancel or settlement its outcome.
func testBrokerResendsLostReplies(t *testing.T, nb NewBackend) {
	be := nb(t)
	be.Client.AddHook(dropReplies{})
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	lost := func() context.Context { return dropping(s.ctx, 2) }

	id, err := s.b.Client().Enqueue(lost(), broker.Job{Queue: s.q, Kind: "k", ID: "once", MaxAttempts: 1})
	noErr(t, "Enqueue whose replies were lost", err)
	want(t, "id", id, "once")
	for i, e := range s.b.Client().EnqueueMany(lost(), []broker.Job{{Queue: s.q, Kind: "k", ID: "many"}, {Queue: s.q, Kind: "k"}, {Queue: "other", Kind: "k"}}) {
		if e.Err != nil {
			t.Fatalf("EnqueueMany whose replies were lost: job %d answered %v", i, e.Err)
		}
	}
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "pending after enqueues whose replies were lost", c.Pending, int64(3))

	res, err := s.b.Leases().Claim(lost(), s.q, 1, long)
	noErr(t, "Claim whose replies were lost", err)
	if len(res.Leases) != 1 || res.Leases[0].ID != "once" || res.Leases[0].Attempt != 1 {
		t.Fatalf("Claim whose replies were lost answered %+v; want job once, attempt 1", res.Leases)
	}
	l := res.Leases[0]
	want(t, "the claim Redis holds", s.job(t, l.ID).ClaimID, l.ClaimID())
	o, err := s.b.Leases().Ack(lost(), l, []byte("r"))
	noErr(t, "Ack whose replies were lost", err)
	want(t, "Ack whose replies were lost", o, broker.OK)
	want(t, "acked job", s.job(t, l.ID).State, broker.StateDone)

	// A claim of two, failed dead, retried; then released and cancelled.
	res, err = s.b.Leases().ClaimRequest(lost(), broker.NewRequestID(), s.q, 2, long)
	noErr(t, "ClaimRequest whose replies were lost", err)
	want(t, "jobs claimed", len(res.Leases), 2)
	got, err := s.b.Leases().Fail(lost(), res.Leases[0], broker.Failure{Error: "boom", Dead: true})
	o, st := got.Outcome, got.State
	noErr(t, "Fail whose replies were lost", err)
	want(t, "Fail whose replies were lost", o, broker.OK)
	want(t, "state after Fail", st, broker.StateDead)
	prev, err := s.b.Inspector().Retry(lost(), s.q, res.Leases[0].ID)
	noErr(t, "Retry whose replies were lost", err)
	want(t, "Retry's previous state", prev, broker.StateDead)
	got, err = s.b.Leases().Release(lost(), res.Leases[1])
	o, st = got.Outcome, got.State
	noErr(t, "Release whose replies were lost", err)
	want(t, "Release whose replies were lost", o, broker.OK)
	want(t, "state after Release", st, broker.StatePending)
	st, err = s.b.Inspector().Cancel(lost(), s.q, res.Leases[1].ID)
	noErr(t, "Cancel whose replies were lost", err)
	want(t, "Cancel whose replies were lost", st, broker.StateCancelled)

	// Settlements that claim the next job in the same call.
	l = s.claimOne(t, long)
	spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 1, Lease: long}
	fused, err := s.b.Leases().FusedSnooze(lost(), l, 0, spec)
	o, st, next := fused.Outcome, fused.State, fused.Claim
	noErr(t, "FusedSnooze whose replies were lost", err)
	want(t, "FusedSnooze", o, broker.OK)
	want(t, "state after FusedSnooze", st, broker.StatePending)
	want(t, "jobs FusedSnooze took", len(next.Leases), 1)
	s.enqueue(t, broker.Job{})
	fa, err := s.b.Leases().FusedAck(lost(), []broker.Ack{{Lease: next.Leases[0]}},
		broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 1, Lease: long})
	os, next := fa.Outcomes, fa.Claim
	noErr(t, "FusedAck whose replies were lost", err)
	want(t, "FusedAck's ack", os[0], broker.OK)
	want(t, "jobs FusedAck took", len(next.Leases), 1)
	fused, err = s.b.Leases().FusedFail(lost(), next.Leases[0], broker.Failure{Error: "x", Backoff: time.Hour},
		broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 1, Lease: long})
	o, st = fused.Outcome, fused.State
	noErr(t, "FusedFail whose replies were lost", err)
	want(t, "FusedFail", o, broker.OK)
	want(t, "state after FusedFail", st, broker.StateScheduled)
	c, _ = s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "running after the lost replies", c.Running, int64(0))
	s.consistent(t)
}

// When every reply is lost, the broker stops after a bounded number of
// sends and says that the outcome is unknown (ErrOutcomeUnknown), naming
// the request to ask about: a claim's request id, which ClaimRequest
// answers with the leases the lost sends took, so the job still runs
// under its one claim; an enqueue's job id.
func testResendGivesUp(t *testing.T, nb NewBackend) {
	be := nb(t)
	be.Client.AddHook(dropReplies{})
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	never := func() context.Context { return dropping(s.ctx, -1) }
	s.enqueue(t, broker.Job{Delay: time.Hour}) // the queue is registered: the scripts' replies are lost

	id, err := s.b.Client().Enqueue(never(), broker.Job{Queue: s.q, Kind: "k", ID: "e", MaxAttempts: 1})
	wantErr(t, "Enqueue whose replies are all lost", err, broker.ErrOutcomeUnknown)
	want(t, "id answered", id, "e")
	var unknown *broker.OutcomeUnknownError
	if !errors.As(err, &unknown) || unknown.RequestID != "e" || unknown.Op != "enqueue" {
		t.Fatalf("Enqueue's error %v (%#v): want an *OutcomeUnknownError naming enqueue and job e", err, unknown)
	}
	if !broker.IsTransient(err) {
		t.Fatalf("an unknown outcome after timeouts is not transient: %v", err)
	}
	_, err = s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k", ID: "e"})
	wantErr(t, "the lost enqueue stored its job", err, broker.ErrJobExists)

	_, err = s.b.Leases().Claim(never(), s.q, 1, long)
	wantErr(t, "Claim whose replies are all lost", err, broker.ErrOutcomeUnknown)
	if !errors.As(err, &unknown) || unknown.RequestID == "" || unknown.Op != "claim" || unknown.Queue != s.q {
		t.Fatalf("Claim's error %v: want an *OutcomeUnknownError naming the claim's request id", err)
	}
	res, err := s.b.Leases().ClaimRequest(s.ctx, unknown.RequestID, s.q, 1, long)
	noErr(t, "ClaimRequest under the id the error named", err)
	if len(res.Leases) != 1 || res.Leases[0].ID != "e" || res.Leases[0].Attempt != 1 {
		t.Fatalf("the re-ask answered %+v; want job e, attempt 1", res.Leases)
	}
	want(t, "the claim Redis holds", s.job(t, "e").ClaimID, res.Leases[0].ClaimID())
	o, err := s.b.Leases().Ack(s.ctx, res.Leases[0], nil)
	noErr(t, "Ack", err)
	want(t, "Ack of the re-asked lease", o, broker.OK)

	ctx, cancel := context.WithCancel(never())
	cancel()
	_, err = s.b.Inspector().Retry(ctx, s.q, "e")
	wantErr(t, "Retry with a context ended", err, context.Canceled)
}

// A claim that takes nothing leaves a record under its request id (the
// known gap of the re-ask): a re-ask that comes first and finds nothing
// ready makes the late original, a fused call under the same id, claim
// nothing, so no job is taken under a token nobody learns and later
// charged an attempt by the reaper.
func testReaskThatTookNothingFencesTheOriginal(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	req := broker.NewRequestID()
	res, err := s.b.Leases().ClaimRequest(s.ctx, req, s.q, 1, long) // the re-ask, first
	noErr(t, "ClaimRequest (the re-ask) of an empty queue", err)
	want(t, "jobs the re-ask took", len(res.Leases), 0)
	id := s.enqueue(t, broker.Job{MaxAttempts: 1})

	// The original, late: a FusedAck with the same claim, then a FusedFail.
	fa, err := s.b.Leases().FusedAck(s.ctx, nil, broker.ClaimSpec{RequestID: req, Queue: s.q, N: 1, Lease: long})
	res = fa.Claim
	noErr(t, "FusedAck (the late original)", err)
	want(t, "jobs the late original took", len(res.Leases), 0)
	other := s.enqueue(t, broker.Job{})
	req2 := broker.NewRequestID()
	l := s.claimOne(t, long)
	want(t, "claimed", l.ID, id)
	_, err = s.b.Leases().ClaimRequest(s.ctx, req2, s.q, 1, time.Hour)
	noErr(t, "ClaimRequest (the re-ask)", err)
	s.enqueue(t, broker.Job{})
	fused, err := s.b.Leases().FusedFail(s.ctx, l, broker.Failure{Error: "x"}, broker.ClaimSpec{RequestID: req2, Queue: s.q, N: 1, Lease: long})
	res = fused.Claim
	noErr(t, "FusedFail (the late original)", err)
	if len(res.Leases) != 1 || res.Leases[0].ID != other {
		t.Fatalf("the late FusedFail answered %+v; want the lease its re-ask took, of %s", res.Leases, other)
	}
	res, err = s.b.Leases().ClaimRequest(s.ctx, req, s.q, 1, long)
	noErr(t, "ClaimRequest sent again", err)
	want(t, "jobs a third send took", len(res.Leases), 0)
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "running: the one lease the re-ask answered", c.Running, int64(1))
	want(t, "pending", c.Pending, int64(1))
	s.consistent(t)
}
