package brokertest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// errOOM is the error reply of a server at maxmemory (noeviction), which
// refuses a script that writes.
type errOOM struct{}

func (errOOM) Error() string { return "OOM command not allowed when used memory > 'maxmemory'." }
func (errOOM) RedisError()   {}

// refuseResend lets the first script call sent with a context from
// h.ctx run and loses its reply; the calls after it are refused with an
// OOM error reply without running.
type refuseResend struct {
	sent *atomic.Int64
	key  *int
}

func (h refuseResend) ctx(ctx context.Context) context.Context {
	return context.WithValue(ctx, h.key, true)
}

func (refuseResend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h refuseResend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n != "evalsha" && n != "eval" && n != "fcall" || ctx.Value(h.key) == nil {
			return next(ctx, cmd)
		}
		if h.sent.Add(1) > 1 {
			cmd.SetErr(errOOM{})
			return errOOM{}
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		cmd.SetErr(errReplyLost)
		return errReplyLost
	}
}

func (refuseResend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A claim that ran, whose reply was lost, and whose re-send the server
// refused (OOM at maxmemory, MISCONF, ...: the refusal says nothing of the
// first send) has an unknown outcome, and asking again under its request
// id is the one way to learn its leases. The *OutcomeUnknownError's doc
// says IsTransient holds for it; it does not when the last send's error is
// such a refusal, so the pool's claimRequest stops asking, its dispatcher
// claims again under a new request id, and the first claim's job waits
// for the reaper, which charges it the attempt (invariant 9).
func testResendRefusedStaysTransient(t *testing.T, nb NewBackend) {
	be := nb(t)
	h := refuseResend{sent: &atomic.Int64{}, key: new(int)}
	be.Client.AddHook(h)
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	id := s.enqueue(t, broker.Job{MaxAttempts: 1})
	if _, err := s.b.Leases().ClaimRequest(s.ctx, broker.NewRequestID(), s.q, 0, long); err != nil {
		t.Fatalf("ClaimRequest of none (loads the script): %v", err)
	}

	_, err := s.b.Leases().Claim(h.ctx(s.ctx), s.q, 1, long)
	want(t, "the job the lost first send claimed", s.job(t, id).State, broker.StateRunning)
	var unknown *broker.OutcomeUnknownError
	if !errors.As(err, &unknown) {
		t.Fatalf("Claim whose first send ran and whose re-send was refused answered %v; want an *OutcomeUnknownError", err)
	}
	if !broker.IsTransient(err) {
		t.Fatalf("IsTransient(%v) = false: the claim's outcome is unknown and its job runs under request %s, "+
			"but a caller (the pool's claimRequest) that re-asks on a transient error gives up on it", err, unknown.RequestID)
	}
}
