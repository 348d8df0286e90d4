package brokertest

import (
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// Job.Group is stored on the job hash only when set, handed back by every
// claim of the job (a re-sent claim's too) and shown by Job; a job without
// one stores no group field.
func testGroup(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	key := func(s *bundle, id string) string { return s.b.Prefix() + ":{" + s.q + "}:job:" + id }

	t.Run("RoundTrip", func(t *testing.T) {
		with := s.enqueue(t, broker.Job{ID: "with", Group: "acme"})
		without := s.enqueue(t, broker.Job{ID: "without"})
		// A listing shows it, as it shows the kind.
		p, err := s.b.Inspector().JobPage(s.ctx, s.q, broker.JobQuery{State: broker.StatePending})
		noErr(t, "JobPage", err)
		want(t, "listed", len(p.Jobs), 2)
		for _, j := range p.Jobs {
			want(t, "listed group of "+j.ID, j.Group, map[string]string{with: "acme", without: ""}[j.ID])
		}
		listed, err := s.b.Inspector().JobListed(s.ctx, s.q, with)
		noErr(t, "JobListed", err)
		want(t, "JobListed group", listed.Group, "acme")
		ls := s.claim(t, 2, long)
		want(t, "claimed", len(ls), 2)
		for _, l := range ls {
			want(t, "Lease.Group of "+l.ID, l.Group, map[string]string{with: "acme", without: ""}[l.ID])
		}
		want(t, "Job.Group", s.job(t, with).Group, "acme")
		want(t, "Job.Group of a job without one", s.job(t, without).Group, "")
		g, err := s.Client.HGet(s.ctx, key(s, with), "group").Result()
		noErr(t, "HGET", err)
		want(t, "group field", g, "acme")
		// No group writes no field: the hash is what it was before groups.
		has, err := s.Client.HExists(s.ctx, key(s, without), "group").Result()
		noErr(t, "HEXISTS", err)
		want(t, "group field of a job without a group", has, false)
		for _, l := range ls {
			_, err := s.b.Leases().Ack(s.ctx, l, nil)
			noErr(t, "Ack", err)
		}
	})

	t.Run("KeptByEveryReturnToTheQueue", func(t *testing.T) {
		id := s.enqueue(t, broker.Job{ID: "kept", Group: "globex", MaxAttempts: 3})
		l := s.claimOne(t, long)
		_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "first"})
		noErr(t, "Fail", err)
		l = s.claimOne(t, long)
		want(t, "group after a failed attempt", l.Group, "globex")
		_, err = s.b.Leases().Snooze(s.ctx, l, 0)
		noErr(t, "Snooze", err)
		l = s.claimOne(t, long)
		want(t, "group after a snooze", l.Group, "globex")
		_, err = s.b.Leases().Release(s.ctx, l)
		noErr(t, "Release", err)
		l = s.claimOne(t, short)
		want(t, "group after a release", l.Group, "globex")
		s.Advance(past)
		s.reap(t, 10)
		l = s.claimOne(t, long)
		want(t, "group after a reap", l.Group, "globex")
		_, err = s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "for good", Dead: true})
		noErr(t, "Fail", err)
		want(t, "group of the dead job", s.job(t, id).Group, "globex")
		_, err = s.b.Inspector().Retry(s.ctx, s.q, id)
		noErr(t, "Retry", err)
		// The claim and its re-send (a lost reply) both carry it.
		for range 2 {
			res, err := s.b.Leases().ClaimRequest(s.ctx, "group-resend", s.q, 1, long)
			noErr(t, "ClaimRequest", err)
			want(t, "claimed", len(res.Leases), 1)
			want(t, "group after an operator's retry", res.Leases[0].Group, "globex")
			l = res.Leases[0]
		}
		_, err = s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack", err)
	})

	t.Run("NotInheritedByAReusedID", func(t *testing.T) {
		s := setup(t, nb)
		s.enqueue(t, broker.Job{ID: "reused", Group: "acme"})
		_, err := s.b.Leases().Ack(s.ctx, s.claimOne(t, long), nil)
		noErr(t, "Ack", err)
		s.pastHorizon()
		n, err := s.b.Leases().Trim(s.ctx, s.q, broker.Retention{Done: short}, 10)
		noErr(t, "Trim", err)
		want(t, "trimmed", n, 1)
		s.enqueue(t, broker.Job{ID: "reused"})
		want(t, "Job.Group under a reused id", s.job(t, "reused").Group, "")
		want(t, "claim's group under a reused id", s.claimOne(t, long).Group, "")
	})

	t.Run("Refused", func(t *testing.T) {
		for _, g := range []string{" acme", "acme\n", "\xff", string(make([]byte, broker.MaxGroupBytes+1))} {
			_, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k", ID: "refused", Group: g})
			wantErr(t, "Enqueue with a bad group", err, broker.ErrInvalid)
			if ve := err.(*broker.ValidationError); ve.Field != "group" {
				t.Fatalf("Enqueue with group %q: field %q, want group", g, ve.Field)
			}
			_, err = s.b.Inspector().Job(s.ctx, s.q, "refused")
			wantErr(t, "Job refused for its group", err, broker.ErrJobNotFound)
		}
	})
}
