package brokertest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fenceq/fenceq/broker"
)

// What the dashboard reads: per-minute throughput, each
// attempt's error, and the renewals of the current lease.

// kept is the throughput window in minutes.
const kept = int(broker.ThroughputKept / time.Minute)

// totals sums the whole throughput window of the bundle's queue.
func (s *bundle) totals(t failer) (done, failed int64) {
	t.Helper()
	ms, err := s.b.Inspector().Throughput(s.ctx, s.q, kept)
	noErr(t, "Throughput", err)
	for _, m := range ms {
		done += m.Done
		failed += m.Failed
	}
	return done, failed
}

func (s *bundle) wantTotals(t failer, what string, done, failed int64) {
	t.Helper()
	d, f := s.totals(t)
	if d != done || f != failed {
		t.Fatalf("%s: throughput counts %d done and %d failed, want %d and %d", what, d, f, done, failed)
	}
}

// Each settlement counts once in its minute: an ack that finished a job
// as done, a failure that retried or killed one, an expired lease the
// reaper charged an attempt for. A snooze, a cancellation, a stale
// settlement and the re-send of an applied one count nothing.
func testThroughputCounts(t *testing.T, nb NewBackend) {
	be := nb(t)
	be.Client.AddHook(resend{})
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	lost := context.WithValue(s.ctx, resendKey{}, true)

	s.wantTotals(t, "a queue that settled nothing", 0, 0)
	for i := range 8 {
		s.enqueue(t, broker.Job{ID: fmt.Sprint("j", i), MaxAttempts: 3})
	}
	ls := s.claim(t, 8, long)

	// One batch with the same ack twice: one job done, counted once.
	os, err := s.b.Leases().AckMany(s.ctx, []broker.Ack{{Lease: ls[0]}, {Lease: ls[1]}, {Lease: ls[0]}})
	noErr(t, "AckMany", err)
	want(t, "an ack twice in one batch", os[2], broker.OK)
	s.wantTotals(t, "a batch of two jobs, one acked twice", 2, 0)

	// A lost reply: Redis ran the ack, the client sends it again, and
	// later once more.
	o, err := s.b.Leases().Ack(lost, ls[2], nil)
	noErr(t, "Ack sent twice", err)
	want(t, "Ack sent twice", o, broker.OK)
	o, err = s.b.Leases().Ack(s.ctx, ls[2], nil)
	noErr(t, "Ack sent a third time", err)
	want(t, "Ack sent a third time", o, broker.OK)
	s.wantTotals(t, "an ack re-sent", 3, 0)

	// Failures: a retry and a death count, each once however often sent;
	// a snooze does not.
	got, err := s.b.Leases().Fail(lost, ls[3], broker.Failure{Error: "boom", Backoff: time.Hour})
	st := got.State
	noErr(t, "Fail sent twice", err)
	want(t, "state", st, broker.StateScheduled)
	got, err = s.b.Leases().Fail(lost, ls[4], broker.Failure{Error: "boom", Dead: true})
	st = got.State
	noErr(t, "Fail (dead) sent twice", err)
	want(t, "state", st, broker.StateDead)
	got, err = s.b.Leases().Snooze(lost, ls[5], time.Hour)
	st = got.State
	noErr(t, "Snooze sent twice", err)
	want(t, "state", st, broker.StateScheduled)
	s.wantTotals(t, "a retry, a death and a snooze", 3, 2)

	// A job whose cancel was requested fails into cancelled: not counted.
	_, err = s.b.Inspector().Cancel(s.ctx, s.q, ls[6].ID)
	noErr(t, "Cancel", err)
	got, err = s.b.Leases().Fail(s.ctx, ls[6], broker.Failure{Error: "context canceled"})
	st = got.State
	noErr(t, "Fail of a cancelled job", err)
	want(t, "state", st, broker.StateCancelled)
	s.wantTotals(t, "a cancellation", 3, 2)

	// The reaper charges expired leases: two jobs in one batch count two;
	// a cancel-requested job reaped into cancelled counts nothing.
	s.enqueue(t, broker.Job{ID: "r1", MaxAttempts: 3})
	s.enqueue(t, broker.Job{ID: "r2", MaxAttempts: 1})
	s.enqueue(t, broker.Job{ID: "r3", MaxAttempts: 3})
	expiring := s.claim(t, 3, short)
	_, err = s.b.Inspector().Cancel(s.ctx, s.q, "r3")
	noErr(t, "Cancel", err)
	s.Advance(past)
	if r := s.reap(t, 10); len(r.Reaped) != 3 {
		t.Fatalf("reaped %+v, want 3 jobs", r.Reaped)
	}
	s.wantTotals(t, "three leases reaped, one of them cancelled", 3, 4)

	// Stale settlements, of the reaped claims and of a settled one, count
	// nothing, and neither does a settlement by another op under a claim
	// that was settled (a fail after the ack).
	for _, l := range expiring {
		o, err := s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "stale Ack", err)
		want(t, "stale Ack", o, broker.Stale)
		got, err = s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "late"})
		o = got.Outcome
		noErr(t, "stale Fail", err)
		want(t, "stale Fail", o, broker.Stale)
	}
	got, err = s.b.Leases().Fail(s.ctx, ls[0], broker.Failure{Error: "after the ack"})
	o = got.Outcome
	noErr(t, "Fail after Ack", err)
	want(t, "Fail after Ack", o, broker.Stale)
	s.wantTotals(t, "stale settlements", 3, 4)

	// FusedAck and FusedFail count as AckMany and Fail do.
	spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 1, Lease: long}
	fa, err := s.b.Leases().FusedAck(s.ctx, []broker.Ack{{Lease: ls[7]}}, spec)
	res := fa.Claim
	noErr(t, "FusedAck", err)
	want(t, "claimed by FusedAck", len(res.Leases), 1)
	spec.RequestID = broker.NewRequestID()
	_, err = s.b.Leases().FusedFail(s.ctx, res.Leases[0], broker.Failure{Error: "x", Backoff: time.Hour}, spec)
	noErr(t, "FusedFail", err)
	s.wantTotals(t, "FusedAck and FusedFail", 4, 5)
}

// Throughput answers n minutes, the current one (on Redis's clock) last,
// one minute apart, and refuses a count outside the window.
func testThroughputShape(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	s.enqueue(t, broker.Job{ID: "a"})
	_, err := s.b.Leases().Ack(s.ctx, s.claimOne(t, long), nil)
	noErr(t, "Ack", err)

	before, err := s.Client.Time(s.ctx).Result()
	noErr(t, "TIME", err)
	ms, err := s.b.Inspector().Throughput(s.ctx, s.q, 5)
	noErr(t, "Throughput", err)
	after, err := s.Client.Time(s.ctx).Result()
	noErr(t, "TIME", err)
	want(t, "minutes", len(ms), 5)
	last := ms[4].Start
	if last.After(after) || !last.Add(time.Minute).After(before) || last.UnixMilli()%60000 != 0 {
		t.Fatalf("the last minute starts at %v; Redis's clock read %v then %v", last, before, after)
	}
	for i := 1; i < len(ms); i++ {
		want(t, fmt.Sprint("minute ", i, " after the one before"), ms[i].Start.Sub(ms[i-1].Start), time.Minute)
	}

	ms, err = s.b.Inspector().Throughput(s.ctx, s.q, kept)
	noErr(t, "Throughput of the whole window", err)
	want(t, "minutes", len(ms), kept)
	for _, n := range []int{0, -1, kept + 1} {
		_, err := s.b.Inspector().Throughput(s.ctx, s.q, n)
		wantErr(t, fmt.Sprint("Throughput of ", n, " minutes"), err, broker.ErrInvalid)
	}
	_, err = s.b.Inspector().Throughput(s.ctx, "bad{queue}", 1)
	wantErr(t, "Throughput of a bad queue name", err, broker.ErrInvalid)
}

// statsState reads the stats hash: its head and the minutes of its
// counters.
func (s *bundle) statsState(t failer) (head int64, minutes map[int64]bool) {
	t.Helper()
	h, err := s.Client.HGetAll(s.ctx, s.queueKey("stats")).Result()
	noErr(t, "HGETALL stats", err)
	minutes = map[int64]bool{}
	for f := range h {
		if f == "head" {
			head, err = strconv.ParseInt(h[f], 10, 64)
			noErr(t, "head", err)
			continue
		}
		m, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSuffix(f, ":d"), ":f"), 10, 64)
		noErr(t, "stats field "+f, err)
		minutes[m] = true
	}
	return head, minutes
}

// plant writes a stats hash by hand: counters of 1 for minutes from..to
// (both kinds), and head.
func (s *bundle) plant(t failer, head, from, to int64) {
	t.Helper()
	key := s.queueKey("stats")
	noErr(t, "DEL stats", s.Client.Del(s.ctx, key).Err())
	fields := []any{"head", head}
	for m := from; m <= to; m++ {
		fields = append(fields, fmt.Sprint(m, ":d"), 1, fmt.Sprint(m, ":f"), 1)
	}
	noErr(t, "plant stats", s.Client.HSet(s.ctx, key, fields...).Err())
}

// redisMinute is the current minute on Redis's clock.
func (s *bundle) redisMinute(t failer) int64 {
	t.Helper()
	now, err := s.Client.Time(s.ctx).Result()
	noErr(t, "TIME", err)
	return now.UnixMilli() / 60000
}

// wantWindow checks the stats hash keeps exactly the minutes of the window
// that ends at its head, out of the planted ones (from..to) and those in
// also.
func (s *bundle) wantWindow(t failer, what string, from, to int64, also ...int64) int64 {
	t.Helper()
	head, minutes := s.statsState(t)
	wantMinutes := map[int64]bool{}
	for m := max(from, head-int64(kept)+1); m <= to; m++ {
		wantMinutes[m] = true
	}
	for _, m := range also {
		wantMinutes[m] = true
	}
	if len(minutes) != len(wantMinutes) {
		t.Fatalf("%s: the stats hash holds %d minutes, want %d (head %d)", what, len(minutes), len(wantMinutes), head)
	}
	for m := range minutes {
		if !wantMinutes[m] {
			t.Fatalf("%s: the stats hash holds minute %d, outside its window (head %d)", what, m, head)
		}
	}
	return head
}

// Old minutes leave without a scan: the settlement that opens a minute
// deletes those that fell out of the window since the last one (after an
// idle gap of any length), Trim does the same for a queue gone idle, and a
// clock gone back past the window, or counters without a head, start the
// hash again. A hand-edited stats key costs counts, never a settlement.
func testThroughputWindow(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	ack := func(t *testing.T) {
		t.Helper()
		s.enqueue(t, broker.Job{})
		o, err := s.b.Leases().Ack(s.ctx, s.claimOne(t, long), nil)
		noErr(t, "Ack", err)
		want(t, "Ack", o, broker.OK)
	}
	// settle acks a job and answers its minute, the stats hash's head.
	settle := func(t *testing.T) int64 {
		t.Helper()
		ack(t)
		head, _ := s.statsState(t)
		return head
	}
	k := int64(kept)

	for _, gap := range []int64{1, 10, k - 1} {
		t.Run(fmt.Sprint("a gap of ", gap, " minutes"), func(t *testing.T) {
			m0 := s.redisMinute(t)
			s.plant(t, m0-gap, m0-gap-k+1, m0-gap) // a full window, gap minutes ago
			m := settle(t)
			if m < m0 {
				t.Fatalf("head %d, before the minute %d read before the ack", m, m0)
			}
			s.wantWindow(t, "after the gap", m0-gap-k+1, m0-gap, m)
			ms, err := s.b.Inspector().Throughput(s.ctx, s.q, kept)
			noErr(t, "Throughput", err)
			var d, f int64
			for _, x := range ms {
				d, f = d+x.Done, f+x.Failed
			}
			// The minutes read end at the read's own, which may be past m.
			read := ms[len(ms)-1].Start.UnixMilli() / 60000
			want(t, "done in the window", d, max(0, m0-gap-(read-k+1)+1)+1)
			want(t, "failed in the window", f, max(0, m0-gap-(read-k+1)+1))
		})
	}
	t.Run("idle for 7 hours", func(t *testing.T) {
		m0 := s.redisMinute(t)
		s.plant(t, m0-420, m0-k-419, m0-420)
		m := settle(t)
		s.wantWindow(t, "after 7 idle hours", 0, -1, m)
		s.wantTotals(t, "after 7 idle hours", 1, 0)
	})
	t.Run("the clock gone back past the window", func(t *testing.T) {
		m0 := s.redisMinute(t)
		s.plant(t, m0+k+5, m0+6, m0+k+5)
		m := settle(t)
		s.wantWindow(t, "after the clock went back", 0, -1, m)
	})
	t.Run("counters without a head", func(t *testing.T) {
		m0 := s.redisMinute(t)
		s.plant(t, 0, m0-3, m0-1)
		noErr(t, "HDEL head", s.Client.HDel(s.ctx, s.queueKey("stats"), "head").Err())
		m := settle(t)
		s.wantWindow(t, "after counters without a head", 0, -1, m)
	})
	t.Run("trim of a queue gone idle", func(t *testing.T) {
		m0 := s.redisMinute(t)
		s.plant(t, m0-5, m0-k-4, m0-5)
		_, err := s.b.Leases().Trim(s.ctx, s.q, broker.Retention{}, 10)
		noErr(t, "Trim", err)
		s.wantWindow(t, "after Trim", m0-k-4, m0-5)

		s.plant(t, m0-k-1, m0-2*k, m0-k-1)
		_, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{}, 10)
		noErr(t, "Trim", err)
		n, err := s.Client.Exists(s.ctx, s.queueKey("stats")).Result()
		noErr(t, "EXISTS", err)
		want(t, "stats keys after Trim of a queue idle for longer than the window", n, int64(0))
		_, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{}, 10)
		noErr(t, "Trim", err)
		n, _ = s.Client.Exists(s.ctx, s.queueKey("stats")).Result()
		want(t, "stats keys after Trim of a queue that counted nothing", n, int64(0))
	})
	t.Run("a hand-edited stats key", func(t *testing.T) {
		noErr(t, "DEL", s.Client.Del(s.ctx, s.queueKey("stats")).Err())
		noErr(t, "SET", s.Client.Set(s.ctx, s.queueKey("stats"), "x", 0).Err())
		ack(t) // goes through, uncounted
		_, err := s.b.Inspector().Throughput(s.ctx, s.q, 1)
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("Throughput of a stats key that is not a hash: %v, want a WRONGTYPE error", err)
		}
		_, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{}, 10)
		noErr(t, "Trim with a stats key that is not a hash", err)

		noErr(t, "DEL", s.Client.Del(s.ctx, s.queueKey("stats")).Err())
		m0 := s.redisMinute(t)
		noErr(t, "HSET", s.Client.HSet(s.ctx, s.queueKey("stats"), "head", m0, fmt.Sprint(m0, ":d"), "x", fmt.Sprint(m0+1, ":d"), "x").Err())
		ack(t)
		_, err = s.b.Inspector().Throughput(s.ctx, s.q, 2)
		noErr(t, "Throughput with a garbage counter", err)
	})
}

// Many settlements in one minute add up exactly, in batches as a busy
// pool acks them.
func testThroughputMany(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	const n, batch = 2000, 250
	jobs := make([]broker.Job, n)
	for i := range jobs {
		jobs[i] = broker.Job{Queue: s.q, Kind: "k"}
	}
	for _, e := range s.b.Client().EnqueueMany(s.ctx, jobs) {
		noErr(t, "EnqueueMany", e.Err)
	}
	for range n / batch {
		ls := s.claim(t, batch, long)
		acks := make([]broker.Ack, len(ls))
		for i, l := range ls {
			acks[i] = broker.Ack{Lease: l}
		}
		_, err := s.b.Leases().AckMany(s.ctx, acks)
		noErr(t, "AckMany", err)
	}
	s.wantTotals(t, "after many acks", n, 0)
}

// A job keeps the errors of its last ErrorsKept failed attempts, oldest
// first, each cut to ErrorBytesKept; a snooze adds none, an expired lease
// charged by the reaper adds one, a retry keeps them, and a history that
// does not decode costs it, never the job.
func testErrorHistory(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{MaxAttempts: 30})
	fail := func(msg string) {
		t.Helper()
		_, err := s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: msg})
		noErr(t, "Fail", err)
	}
	want(t, "errors of a new job", len(s.job(t, id).Errors), 0)
	for i := 1; i <= 12; i++ {
		fail(fmt.Sprint("e", i))
	}
	_, err := s.b.Leases().Snooze(s.ctx, s.claimOne(t, long), 0)
	noErr(t, "Snooze", err)
	j := s.job(t, id)
	want(t, "errors kept", len(j.Errors), broker.ErrorsKept)
	for i, e := range j.Errors {
		want(t, fmt.Sprint("attempt of error ", i), e.Attempt, i+3)
		want(t, fmt.Sprint("error ", i), e.Error, fmt.Sprint("e", i+3))
		if e.At.IsZero() || i > 0 && e.At.Before(j.Errors[i-1].At) {
			t.Fatalf("error %d recorded at %v, after %v", i, e.At, j.Errors[max(i-1, 0)].At)
		}
	}
	want(t, "last error", j.LastError, "e12")

	// A long error is cut at a character boundary; last_error keeps more.
	huge := strings.Repeat("é", 1500) // 3000 bytes
	fail(huge)
	j = s.job(t, id)
	e := j.Errors[len(j.Errors)-1]
	if len(e.Error) > broker.ErrorBytesKept || len(e.Error) < broker.ErrorBytesKept-1 || !utf8.ValidString(e.Error) || !strings.HasPrefix(huge, e.Error) {
		t.Fatalf("a long error kept as %d bytes (valid UTF-8: %v)", len(e.Error), utf8.ValidString(e.Error))
	}
	want(t, "attempt of the long error", e.Attempt, 13)
	want(t, "last error", j.LastError, huge)

	// The reaper's charge.
	s.claimOne(t, short)
	s.Advance(past)
	s.reap(t, 10)
	j = s.job(t, id)
	e = j.Errors[len(j.Errors)-1]
	want(t, "error of a reaped attempt", e.Error, "lease expired without renewal (worker lost)")
	want(t, "attempt of the reaped one", e.Attempt, 14)
	want(t, "errors kept", len(j.Errors), broker.ErrorsKept)
	_, err = s.b.Inspector().Cancel(s.ctx, s.q, id) // out of the way of the claims below
	noErr(t, "Cancel", err)

	// Dead, retried, failed again: the history goes on.
	d := s.enqueue(t, broker.Job{MaxAttempts: 1})
	fail("first")
	_, err = s.b.Inspector().Retry(s.ctx, s.q, d)
	noErr(t, "Retry", err)
	want(t, "errors after a retry", len(s.job(t, d).Errors), 1)
	fail("second")
	j = s.job(t, d)
	if len(j.Errors) != 2 || j.Errors[0].Error != "first" || j.Errors[1].Error != "second" || j.Errors[1].Attempt != 1 {
		t.Fatalf("errors of a retried job: %+v", j.Errors)
	}

	// A history that does not decode.
	for _, bad := range []string{"not json", `{"attempt":1}`, `[1,2]`, `[{"attempt":1}]`} {
		noErr(t, "corrupt errors", s.Client.HSet(s.ctx, s.jobKey(d), "errors", bad).Err())
		j = s.job(t, d)
		if j.Errors != nil || j.LastError != "second" {
			t.Fatalf("a job whose errors field is %q read as errors %+v, last error %q", bad, j.Errors, j.LastError)
		}
	}
	_, err = s.b.Inspector().Retry(s.ctx, s.q, d)
	noErr(t, "Retry", err)
	fail("third")
	j = s.job(t, d)
	if len(j.Errors) != 1 || j.Errors[0].Error != "third" {
		t.Fatalf("a failure over a corrupt history left %+v", j.Errors)
	}
	s.consistent(t)
}

// Renewals counts the renewals of the last claim: a new claim starts
// again, a stale renew counts nothing, a settled job keeps its count.
func testRenewals(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	a := s.enqueue(t, broker.Job{})
	b := s.enqueue(t, broker.Job{})
	ls := s.claim(t, 2, long)
	want(t, "renewals of a new claim", s.job(t, a).Renewals, 0)
	for range 3 {
		rs, err := s.b.Leases().Renew(s.ctx, ls, long)
		noErr(t, "Renew", err)
		want(t, "renewal", rs[0].Outcome, broker.OK)
	}
	_, err := s.b.Leases().Renew(s.ctx, ls[1:], long)
	noErr(t, "Renew", err)
	want(t, "renewals of a", s.job(t, a).Renewals, 3)
	want(t, "renewals of b", s.job(t, b).Renewals, 4)

	// Released and claimed again: the old claim's renew is stale.
	_, err = s.b.Leases().Release(s.ctx, ls[0])
	noErr(t, "Release", err)
	again := s.claimOne(t, long)
	want(t, "renewals of a claim after a release", s.job(t, a).Renewals, 0)
	rs, err := s.b.Leases().Renew(s.ctx, []broker.Lease{ls[0], again}, long)
	noErr(t, "Renew", err)
	want(t, "stale renewal", rs[0].Outcome, broker.Stale)
	want(t, "renewals after a stale and a valid renew", s.job(t, a).Renewals, 1)

	_, err = s.b.Leases().Ack(s.ctx, ls[1], nil)
	noErr(t, "Ack", err)
	want(t, "renewals of a done job", s.job(t, b).Renewals, 4)

	noErr(t, "corrupt renewals", s.Client.HSet(s.ctx, s.jobKey(a), "renewals", "x").Err())
	want(t, "renewals that are not a number", s.job(t, a).Renewals, 0)
	rs, err = s.b.Leases().Renew(s.ctx, []broker.Lease{again}, long)
	noErr(t, "Renew over garbage", err)
	want(t, "renewal over garbage", rs[0].Outcome, broker.OK)
	want(t, "renewals over garbage (uncounted)", s.job(t, a).Renewals, 0)
	_, err = s.b.Leases().Release(s.ctx, again)
	noErr(t, "Release", err)
	again = s.claimOne(t, long)
	_, err = s.b.Leases().Renew(s.ctx, []broker.Lease{again}, long)
	noErr(t, "Renew", err)
	want(t, "renewals of the next claim", s.job(t, a).Renewals, 1)
}

// "Done in the last minute" comes from the per-minute counters the chart
// reads, not from the done index, which retention trims: with at most 10
// done jobs kept, inspect said 10 for a minute that finished 50.
func testDoneLastMinuteFromStats(t *testing.T, nb NewBackend) {
	const n = 50
	for try := 0; ; try++ {
		s := setup(t, nb)
		jobs := make([]broker.Job, n)
		for i := range jobs {
			jobs[i] = broker.Job{Queue: s.q, Kind: "k"}
		}
		for _, e := range s.b.Client().EnqueueMany(s.ctx, jobs) {
			noErr(t, "EnqueueMany", e.Err)
		}
		ls := s.claim(t, n, long)
		want(t, "claimed", len(ls), n)
		acks := make([]broker.Ack, n)
		for i, l := range ls {
			acks[i] = broker.Ack{Lease: l}
		}
		before := s.redisMinute(t)
		_, err := s.b.Leases().AckMany(s.ctx, acks)
		noErr(t, "AckMany", err)
		s.pastHorizon()
		_, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{MaxDone: 10}, 100)
		noErr(t, "Trim", err)
		o, err := s.b.Inspector().Overview(s.ctx, s.q)
		noErr(t, "Overview", err)
		if s.redisMinute(t) != before && try < 5 {
			// A minute began in between (a real server's clock, or the
			// step past the re-send horizon, which crosses a minute one
			// time in ten): the figure is then an estimate. Again, on a
			// queue of its own.
			continue
		}
		want(t, "done jobs kept", o.Done, int64(10))
		want(t, "done in the last minute", o.DoneLastMinute, int64(n))
		return
	}
}
