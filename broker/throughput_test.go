package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// The throughput window on a clock set by hand (miniredis): settlements
// land in the minute of their script call, a batch in one minute however
// close to its end, the window follows the clock, and a queue idle for
// longer than the window leaves nothing behind. A real server cannot skip
// hours, so this runs on miniredis only; the conformance suite checks the
// same rules on both with counters planted by hand.
func TestThroughputOnAClockSetByHand(t *testing.T) {
	mr := miniredis.RunT(t)
	now := time.Date(2026, 12, 1, 12, 0, 59, 990e6, time.UTC) // 10 ms before 12:01
	mr.SetTime(now)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const q = "q"
	advance := func(d time.Duration) {
		now = now.Add(d)
		mr.SetTime(now)
	}
	ackAll := func(n int) {
		t.Helper()
		jobs := make([]broker.Job, n)
		for i := range jobs {
			jobs[i] = broker.Job{Queue: q, Kind: "k"}
		}
		for _, e := range b.Client().EnqueueMany(ctx, jobs) {
			if e.Err != nil {
				t.Fatal(e.Err)
			}
		}
		res, err := b.Leases().Claim(ctx, q, n, time.Hour)
		if err != nil || len(res.Leases) != n {
			t.Fatalf("Claim: %v (%d leases)", err, len(res.Leases))
		}
		acks := make([]broker.Ack, n)
		for i, l := range res.Leases {
			acks[i] = broker.Ack{Lease: l}
		}
		if _, err := b.Leases().AckMany(ctx, acks); err != nil {
			t.Fatal(err)
		}
	}
	minutes := func(n int) []broker.Minute {
		t.Helper()
		ms, err := b.Inspector().Throughput(ctx, q, n)
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	stats := "fenceq:{q}:stats"

	ackAll(5) // at 12:00:59.990, one batch: all in 12:00
	advance(20 * time.Millisecond)
	ackAll(2) // 12:01:00.010
	ms := minutes(3)
	noon := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	want := []broker.Minute{{Start: noon.Add(-time.Minute)}, {Start: noon, Done: 5}, {Start: noon.Add(time.Minute), Done: 2}}
	for i := range want {
		if !ms[i].Start.Equal(want[i].Start) || ms[i].Done != want[i].Done || ms[i].Failed != want[i].Failed {
			t.Fatalf("minutes %+v, want %+v", ms, want)
		}
	}

	// Busy for the whole window and a minute more: 12:00 falls out when
	// 18:00 opens, and the hash holds one window.
	for range broker.ThroughputKept / time.Minute {
		advance(time.Minute)
		ackAll(1)
	}
	ms = minutes(int(broker.ThroughputKept / time.Minute))
	if !ms[0].Start.Equal(noon.Add(2*time.Minute)) || ms[0].Done != 1 {
		t.Fatalf("the oldest minute of the window is %+v, want 12:02 with 1 done", ms[0])
	}
	// 360 minutes of done counters (none failed) and the head.
	if fields, err := mr.HKeys(stats); err != nil || len(fields) != 360+1 {
		t.Fatalf("the stats hash holds %d fields (%v), want %d", len(fields), err, 360+1)
	}

	// Idle for 7 hours: the window reads zeros, and Trim deletes the hash.
	advance(7 * time.Hour)
	for _, m := range minutes(360) {
		if m.Done != 0 || m.Failed != 0 {
			t.Fatalf("minute %v of an idle window counts %+v", m.Start, m)
		}
	}
	if _, err := b.Leases().Trim(ctx, q, broker.Retention{}, 10); err != nil {
		t.Fatal(err)
	}
	if mr.Exists(stats) {
		fields, _ := mr.HKeys(stats)
		t.Fatalf("the stats hash of a queue idle for 7 hours is still there: %v", fields)
	}
}
