package brokertest

import (
	"errors"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

const (
	long  = time.Hour             // a lease that cannot expire during a test
	short = 30 * time.Millisecond // a lease a test lets expire
	past  = 40 * time.Millisecond // an Advance that expires a short lease
)

// pastHorizon moves the server's clock past broker.ResendHorizon (on a real
// server, it waits that long): retention then deletes the jobs finished
// before, which it spares until then for their requests' re-sends.
func (s *bundle) pastHorizon() { s.Advance(broker.ResendHorizon + past) }

func (s *bundle) enqueue(t failer, j broker.Job) string {
	t.Helper()
	if j.Queue == "" {
		j.Queue = s.q
	}
	if j.Kind == "" {
		j.Kind = "k"
	}
	id, err := s.b.Client().Enqueue(s.ctx, j)
	if err != nil {
		t.Fatalf("Enqueue(%+v): %v", j, err)
	}
	return id
}

func (s *bundle) claim(t failer, n int, lease time.Duration) []broker.Lease {
	t.Helper()
	res, err := s.b.Leases().Claim(s.ctx, s.q, n, lease)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if len(res.Problems) > 0 {
		t.Fatalf("Claim reported problems: %v", res.Problems)
	}
	return res.Leases
}

func (s *bundle) claimOne(t failer, lease time.Duration) broker.Lease {
	t.Helper()
	ls := s.claim(t, 1, lease)
	if len(ls) != 1 {
		t.Fatalf("Claim took %d jobs, want 1", len(ls))
	}
	return ls[0]
}

func (s *bundle) job(t failer, id string) broker.JobInfo {
	t.Helper()
	j, err := s.b.Inspector().Job(s.ctx, s.q, id)
	if err != nil {
		t.Fatalf("Job(%q): %v", id, err)
	}
	return j
}

// consistent fails the test unless invariant 6 holds for the queue.
func (s *bundle) consistent(t failer) {
	t.Helper()
	bad, err := s.b.Inspector().Check(s.ctx, s.q)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if len(bad) > 0 {
		t.Fatalf("invariant 6 violated: %v", bad)
	}
}

func (s *bundle) reap(t failer, limit int) broker.ReapResult {
	t.Helper()
	r, err := s.b.Leases().Reap(s.ctx, s.q, limit)
	if err != nil {
		t.Fatalf("Reap: %v", err)
	}
	return r
}

func want[T comparable](t failer, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func wantErr(t failer, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want one wrapping %v", what, err, target)
	}
}

func noErr(t failer, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func sameJob(t failer, what string, got, want broker.JobInfo) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: job changed\n got %+v\nwant %+v", what, got, want)
	}
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

// failer is what the helpers need of a test: *testing.T and *rapid.T both fit.
type failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// purge deletes a job the way retention or an operator would: its hash and
// its index entries go.
func (s *bundle) purge(t failer, id string) {
	t.Helper()
	base := s.b.Prefix() + ":{" + s.q + "}:"
	if err := s.Client.Del(s.ctx, base+"job:"+id).Err(); err != nil {
		t.Fatalf("purge %s: %v", id, err)
	}
	// An entry of ready0 stays, as a tombstone would (the claim skips it).
	for _, idx := range []string{"ready_hi", "ready_lo", "scheduled", "leases", "dead", "done", "cancelled"} {
		if err := s.Client.ZRem(s.ctx, base+idx, id).Err(); err != nil {
			t.Fatalf("purge %s: %v", id, err)
		}
	}
}
