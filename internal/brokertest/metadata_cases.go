package brokertest

import (
	"maps"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// Job.Metadata is stored on the job hash as one field, handed back by
// every claim of the job and shown by Job; a job without it stores nothing.
func testMetadata(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	key := func(s *bundle, id string) string { return s.b.Prefix() + ":{" + s.q + "}:job:" + id }
	meta := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme", "note": "ünïcode"}
	wantMeta := func(what string, got map[string]string) {
		t.Helper()
		if !maps.Equal(got, meta) || got == nil {
			t.Fatalf("%s: metadata %v, want %v", what, got, meta)
		}
	}

	t.Run("RoundTrip", func(t *testing.T) {
		with := s.enqueue(t, broker.Job{ID: "with", Metadata: meta})
		without := s.enqueue(t, broker.Job{ID: "without", Metadata: map[string]string{}})
		ls := s.claim(t, 2, long)
		want(t, "claimed", len(ls), 2)
		for _, l := range ls {
			switch l.ID {
			case with:
				wantMeta("Lease", l.Metadata)
				l.Metadata["tenant"] = "changed by a handler"
			case without:
				if l.Metadata != nil {
					t.Fatalf("Lease of a job without metadata: %v, want nil", l.Metadata)
				}
			}
		}
		wantMeta("Job", s.job(t, with).Metadata)
		if m := s.job(t, without).Metadata; m != nil {
			t.Fatalf("Job without metadata: %v, want nil", m)
		}
		// Empty metadata writes no field: the hash is what it was before
		// metadata existed.
		has, err := s.Client.HExists(s.ctx, key(s, without), "meta").Result()
		noErr(t, "HEXISTS", err)
		want(t, "meta field of a job without metadata", has, false)
		for _, l := range ls {
			_, err := s.b.Leases().Ack(s.ctx, l, nil)
			noErr(t, "Ack", err)
		}
	})

	t.Run("KeptByEveryReturnToTheQueue", func(t *testing.T) {
		id := s.enqueue(t, broker.Job{ID: "kept", Metadata: meta, MaxAttempts: 3})
		l := s.claimOne(t, long)
		_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "first"})
		noErr(t, "Fail", err)
		l = s.claimOne(t, long)
		wantMeta("claim after a failed attempt", l.Metadata)
		_, err = s.b.Leases().Release(s.ctx, l)
		noErr(t, "Release", err)
		l = s.claimOne(t, short)
		wantMeta("claim after a release", l.Metadata)
		s.Advance(past)
		s.reap(t, 10)
		l = s.claimOne(t, long)
		wantMeta("claim after a reap", l.Metadata)
		_, err = s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "for good", Dead: true})
		noErr(t, "Fail", err)
		wantMeta("dead job", s.job(t, id).Metadata)
		_, err = s.b.Inspector().Retry(s.ctx, s.q, id)
		noErr(t, "Retry", err)
		// The claim and its re-send (a lost reply) both carry it.
		for range 2 {
			res, err := s.b.Leases().ClaimRequest(s.ctx, "metadata-resend", s.q, 1, long)
			noErr(t, "ClaimRequest", err)
			want(t, "claimed", len(res.Leases), 1)
			wantMeta("claim after an operator's retry", res.Leases[0].Metadata)
			l = res.Leases[0]
		}
		_, err = s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack", err)
	})

	t.Run("RefusedOverTheLimit", func(t *testing.T) {
		// Exactly at the limit is accepted.
		at := map[string]string{"k": strings.Repeat("v", broker.MaxMetadataBytes-1)}
		s.enqueue(t, broker.Job{ID: "at-limit", Metadata: at})
		over := map[string]string{"k": strings.Repeat("v", broker.MaxMetadataBytes)}
		for name, m := range map[string]map[string]string{
			"over": over, "empty key": {"": "x"}, "bad key": {"\xff": "x"}, "bad value": {"k": "\xff"},
		} {
			_, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k", ID: "refused", Metadata: m})
			wantErr(t, "Enqueue with metadata "+name, err, broker.ErrInvalid)
			if ve := err.(*broker.ValidationError); ve.Field != "metadata" {
				t.Fatalf("Enqueue with metadata %s: field %q, want metadata", name, ve.Field)
			}
			_, err = s.b.Inspector().Job(s.ctx, s.q, "refused")
			wantErr(t, "Job refused for its metadata", err, broker.ErrJobNotFound)
		}
		l := s.claimOne(t, long)
		want(t, "claimed", l.ID, "at-limit")
		want(t, "value at the limit", l.Metadata["k"], at["k"])
		_, err := s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack", err)
	})

	t.Run("NotInheritedByAReusedID", func(t *testing.T) {
		s := setup(t, nb)
		s.enqueue(t, broker.Job{ID: "reused", Metadata: meta})
		_, err := s.b.Leases().Ack(s.ctx, s.claimOne(t, long), nil)
		noErr(t, "Ack", err)
		s.pastHorizon()
		n, err := s.b.Leases().Trim(s.ctx, s.q, broker.Retention{Done: short}, 10)
		noErr(t, "Trim", err)
		want(t, "trimmed", n, 1)
		s.enqueue(t, broker.Job{ID: "reused"})
		if m := s.job(t, "reused").Metadata; m != nil {
			t.Fatalf("Job under a reused id: metadata %v, want none", m)
		}
		if m := s.claimOne(t, long).Metadata; m != nil {
			t.Fatalf("claim under a reused id: metadata %v, want none", m)
		}
	})

	t.Run("CorruptMakesTheJobDead", func(t *testing.T) {
		s := setup(t, nb)
		bad := map[string]string{
			"not-json": "tenant=acme", "array": `["a"]`, "empty-array": `[]`,
			"number-value": `{"a":1}`, "nested": `{"a":{"b":"c"}}`, "empty": ``,
		}
		for id := range bad {
			s.enqueue(t, broker.Job{ID: id, Metadata: meta})
		}
		good := s.enqueue(t, broker.Job{ID: "good", Metadata: meta})
		// A null value is read as "" (miniredis's cjson cannot tell it
		// from a missing key, so real Redis must not refuse it either).
		null := s.enqueue(t, broker.Job{ID: "null", Metadata: meta})
		noErr(t, "null", s.Client.HSet(s.ctx, key(s, null), "meta", `{"a":null}`).Err())
		for id, v := range bad {
			noErr(t, "corrupt", s.Client.HSet(s.ctx, key(s, id), "meta", v).Err())
		}
		res, err := s.b.Leases().Claim(s.ctx, s.q, 20, long)
		noErr(t, "Claim", err)
		if len(res.Leases) != 2 || res.Leases[0].ID != good || res.Leases[1].ID != null {
			t.Fatalf("claimed %+v, want only the good job and the null one", res.Leases)
		}
		wantMeta("the good job's lease", res.Leases[0].Metadata)
		if m := res.Leases[1].Metadata; !maps.Equal(m, map[string]string{"a": ""}) {
			t.Fatalf("metadata with a null value: %v, want a: empty", m)
		}
		reasons := map[string]string{}
		for _, p := range res.Problems {
			reasons[p.ID] = p.Reason
		}
		for id := range bad {
			if !strings.Contains(reasons[id], "field meta") {
				t.Errorf("problem for %s = %q, want it to name field meta", id, reasons[id])
			}
			j := s.job(t, id)
			if j.State != broker.StateDead || !strings.Contains(j.LastError, "field meta") {
				t.Errorf("job %s: state %s, last error %q; want dead with the reason", id, j.State, j.LastError)
			}
		}
		s.consistent(t)
	})
}
