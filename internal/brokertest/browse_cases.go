package brokertest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fenceq/fenceq/broker"
)

// testJobPageReadsWhatAListingShows: a page of jobs holds what a listing
// shows (id, kind, state, attempts, times and the start of the last
// error), not the payload, result or error history: a page of 500 jobs
// of 1 MiB payloads does not move 500 MiB. Job reads the whole job.
func testJobPageReadsWhatAListingShows(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	payload := bytes.Repeat([]byte("p"), 256<<10)
	msg := strings.Repeat("é", 2<<10) // 4 KiB, two bytes a character
	id := s.enqueue(t, broker.Job{Kind: "resize", Payload: payload, MaxAttempts: 3})
	l := s.claimOne(t, long)
	if _, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: msg, Dead: true}); err != nil {
		t.Fatal(err)
	}
	p, err := s.b.Inspector().JobPage(s.ctx, s.q, broker.JobQuery{State: broker.StateDead})
	noErr(t, "JobPage", err)
	if len(p.Jobs) != 1 {
		t.Fatalf("JobPage listed %d jobs, want 1", len(p.Jobs))
	}
	j, whole := p.Jobs[0], s.job(t, id)
	if j.ID != id || j.Kind != "resize" || j.State != broker.StateDead || j.Attempt != 1 || j.MaxAttempts != 3 ||
		j.FinishedAt.IsZero() || !j.FinishedAt.Equal(whole.FinishedAt) || !j.CreatedAt.Equal(whole.CreatedAt) {
		t.Errorf("the listed job %+v does not show what Job reads (%s %s %d/%d finished %v)", j, whole.Kind, whole.State, whole.Attempt, whole.MaxAttempts, whole.FinishedAt)
	}
	if len(j.Payload) != 0 || j.Errors != nil {
		t.Errorf("JobPage read the payload (%d bytes) or the error history (%d entries) it does not show", len(j.Payload), len(j.Errors))
	}
	if len(j.LastError) > broker.ListedErrorBytes || !utf8.ValidString(j.LastError) || !strings.HasPrefix(msg, j.LastError) || j.LastError == "" {
		t.Errorf("the listed last error is %d bytes; want the start of it, at most %d bytes, cut at a character", len(j.LastError), broker.ListedErrorBytes)
	}
	if !bytes.Equal(whole.Payload, payload) || whole.LastError != msg {
		t.Error("Job does not read the whole job")
	}
}

// testJobListedReadsNoPayload: JobListed reads one job's figures as a
// listing shows them (a job page's poll), with its lease and renewals, and
// not its payload; a job that is gone is ErrJobNotFound, a key that is no
// job hash ErrCorruptJob, as Job answers.
func testJobListedReadsNoPayload(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{Kind: "resize", Payload: bytes.Repeat([]byte("p"), 64<<10)})
	l := s.claimOne(t, long)
	if _, err := s.b.Leases().Renew(s.ctx, []broker.Lease{l}, long); err != nil {
		t.Fatal(err)
	}
	j, err := s.b.Inspector().JobListed(s.ctx, s.q, id)
	noErr(t, "JobListed", err)
	whole := s.job(t, id)
	if j.State != broker.StateRunning || j.Generation != whole.Generation || !j.LeaseUntil.Equal(whole.LeaseUntil) || j.Renewals != whole.Renewals || j.Renewals == 0 || j.Attempt != 1 {
		t.Errorf("JobListed answered %+v; Job reads state %s, generation %d, lease until %v, %d renewals", j, whole.State, whole.Generation, whole.LeaseUntil, whole.Renewals)
	}
	want(t, "payload bytes JobListed read", len(j.Payload), 0)
	_, err = s.b.Inspector().JobListed(s.ctx, s.q, "nope")
	want(t, "JobListed of a job that is gone is ErrJobNotFound", errors.Is(err, broker.ErrJobNotFound), true)
	noErr(t, "SET a job key", s.Client.Set(s.ctx, s.jobKey("str"), "x", 0).Err())
	_, err = s.b.Inspector().JobListed(s.ctx, s.q, "str")
	want(t, "JobListed of a key that is not a hash is ErrCorruptJob", errors.Is(err, broker.ErrCorruptJob), true)
}
