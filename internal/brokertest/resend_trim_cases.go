package brokertest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// meanwhile is dropReplies with something done between a script's run on
// Redis and the broker's re-send: for a script call (or pipeline of them)
// sent with a context from h.lose, the script runs, then fn runs, then
// the caller gets an i/o timeout instead of the reply. Each meanwhile has
// contexts of its own (a Cluster's client is shared by the tests).
type meanwhile struct {
	fn  func()
	key *int
}

func newMeanwhile(fn func()) meanwhile { return meanwhile{fn: fn, key: new(int)} }

// lose gives ctx a budget of n replies lost, with fn run, by h.
func (h meanwhile) lose(ctx context.Context, n int) context.Context {
	left := &atomic.Int64{}
	left.Store(int64(n))
	return context.WithValue(ctx, h.key, left)
}

func (h meanwhile) drop(ctx context.Context) bool {
	left, _ := ctx.Value(h.key).(*atomic.Int64)
	return left != nil && left.Add(-1) >= 0
}

func (meanwhile) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h meanwhile) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); (n == "evalsha" || n == "eval" || n == "fcall") && err == nil && h.drop(ctx) {
			h.fn()
			cmd.SetErr(errReplyLost)
			return errReplyLost
		}
		return err
	}
}

func (h meanwhile) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil && h.drop(ctx) {
			h.fn()
			for _, c := range cmds {
				c.SetErr(errReplyLost)
			}
			return errReplyLost
		}
		return err
	}
}

// An ack whose first send settled its job, and whose reply was lost, is
// sent again by the broker; were retention (the reaper's Trim, here by
// count: MaxDone) to delete the job in between, the re-send would find no
// job and answer Stale, so its caller would be told the claim was lost for
// a job it did settle (invariant 9: a re-send answers what the first send
// did). Retention spares a job finished within broker.ResendHorizon.
func testAckResentAfterTrimAnswersStale(t *testing.T, nb NewBackend) {
	be := nb(t)
	var s *bundle
	var trimmed int
	h := newMeanwhile(func() {
		// Another worker acks a newer job, and the reaper trims to one.
		l := s.claimOne(t, long)
		if o, err := s.b.Leases().Ack(s.ctx, l, nil); err != nil || o != broker.OK {
			t.Errorf("Ack of b: %v %v", o, err)
		}
		n, err := s.b.Leases().Trim(s.ctx, s.q, broker.Retention{MaxDone: 1}, 10)
		noErr(t, "Trim", err)
		trimmed += n
	})
	be.Client.AddHook(h)
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	s.enqueue(t, broker.Job{ID: "a"})
	s.enqueue(t, broker.Job{ID: "b"})
	l := s.claimOne(t, long)
	want(t, "claimed", l.ID, "a")

	o, err := s.b.Leases().Ack(h.lose(s.ctx, 1), l, []byte("r"))
	noErr(t, "Ack whose reply was lost", err)
	// Retention ran between the send and its re-send, and spared job a,
	// finished within the re-send horizon (broker.ResendHorizon).
	want(t, "jobs trimmed between the send and its re-send", trimmed, 0)
	if o != broker.OK {
		t.Fatalf("Ack whose first send settled job a (retention ran before the re-send) answered %v; want ok, what the first send did", o)
	}
	want(t, "job a", s.job(t, "a").State, broker.StateDone)
	trimAfterTheHorizon(t, s, broker.Retention{MaxDone: 1}, "a")
}

// trimAfterTheHorizon checks, where the server's clock is the test's,
// that once the re-send horizon has passed, retention r deletes job id.
func trimAfterTheHorizon(t *testing.T, s *bundle, r broker.Retention, id string) {
	t.Helper()
	if !s.Frozen {
		return // a real server's clock: no waiting out the horizon here
	}
	s.Advance(broker.ResendHorizon + time.Millisecond)
	n, err := s.b.Leases().Trim(s.ctx, s.q, r, 10)
	noErr(t, "Trim after the horizon", err)
	want(t, "jobs trimmed after the horizon", n, 1)
	_, err = s.b.Inspector().Job(s.ctx, s.q, id)
	wantErr(t, "Job "+id+" after the horizon's trim", err, broker.ErrJobNotFound)
}

// An enqueue whose first send stored its job, and whose reply was lost, is
// sent again by the broker. Were a worker to run the job and retention
// (here MaxDone) to trim it in between, the re-send would find no job
// under the id and store it again: the job would run a second time
// (invariant 9: a re-send changes nothing the first send did not).
// Retention spares a job finished within broker.ResendHorizon.
func testEnqueueResentAfterTrimRunsTwice(t *testing.T, nb NewBackend) {
	be := nb(t)
	var s *bundle
	var trimmed int
	h := newMeanwhile(func() {
		// A worker runs job a at once, then a newer job; the reaper trims to one.
		for _, id := range []string{"a", "b"} {
			if id == "b" {
				s.enqueue(t, broker.Job{ID: "b"})
			}
			l := s.claimOne(t, long)
			want(t, "claimed", l.ID, id)
			if o, err := s.b.Leases().Ack(s.ctx, l, nil); err != nil || o != broker.OK {
				t.Errorf("Ack of %s: %v %v", id, o, err)
			}
		}
		n, err := s.b.Leases().Trim(s.ctx, s.q, broker.Retention{MaxDone: 1}, 10)
		noErr(t, "Trim", err)
		trimmed += n
	})
	be.Client.AddHook(h)
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	s.enqueue(t, broker.Job{Delay: long}) // the queue is registered, the script loaded

	id, err := s.b.Client().Enqueue(h.lose(s.ctx, 1), broker.Job{Queue: s.q, Kind: "k", ID: "a"})
	noErr(t, "Enqueue whose reply was lost", err)
	want(t, "id", id, "a")
	// Retention ran between the send and its re-send, and spared job a,
	// finished within the re-send horizon (broker.ResendHorizon).
	want(t, "jobs trimmed between the send and its re-send", trimmed, 0)
	c, err := s.b.Inspector().Counts(s.ctx, s.q)
	noErr(t, "Counts", err)
	if c.Pending != 0 {
		t.Fatalf("job a ran and retention ran between the enqueue and the broker's re-send, and %d job is pending again: "+
			"the re-send stored it a second time (state %s), so it runs twice", c.Pending, s.job(t, "a").State)
	}
	want(t, "job a", s.job(t, "a").State, broker.StateDone)
	trimAfterTheHorizon(t, s, broker.Retention{MaxDone: 1}, "a")
}

// With Options.WaitReplicas the broker sends no enqueue again that may
// have run (its WAIT must follow the write on the same connection), so a
// lost reply leaves the outcome unknown at once; its error must say so
// (errors.Is ErrOutcomeUnknown, an *OutcomeUnknownError naming the job's
// id), as every other request's does, for the caller to enqueue it again
// under that id and never under a new one. It answers the bare i/o timeout.
func testDurableEnqueueLostReplySaysUnknown(t *testing.T, nb NewBackend) {
	be := nb(t)
	be.Client.AddHook(dropReplies{})
	s, cleanup := on(t, be, func(o *broker.Options) { o.WaitReplicas, o.WaitTimeout = 1, time.Millisecond })
	t.Cleanup(cleanup)
	// The queue is registered, the script loaded (no replica: ErrNotReplicated).
	if _, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k"}); err != nil && !errors.Is(err, broker.ErrNotReplicated) {
		t.Fatalf("Enqueue: %v", err)
	}
	id, err := s.b.Client().Enqueue(dropping(s.ctx, 1), broker.Job{Queue: s.q, Kind: "k"})
	if _, jerr := s.b.Inspector().Job(s.ctx, s.q, id); jerr != nil {
		t.Fatalf("the enqueue whose reply was lost did not store job %q (%v): the test did not lose a reply", id, jerr)
	}
	if err == nil {
		t.Skip("no reply was lost: a Cluster's per-node pipeline (enqueueDurably) runs without the client's hooks")
	}
	var unknown *broker.OutcomeUnknownError
	if !errors.As(err, &unknown) || unknown.RequestID != id {
		t.Fatalf("a durable Enqueue that stored job %s and whose reply was lost answered %v; want an *OutcomeUnknownError (ErrOutcomeUnknown) naming the job's id", id, err)
	}
}
