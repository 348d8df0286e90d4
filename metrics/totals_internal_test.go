package metrics

import (
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// minutes builds Throughput's answer: the minutes from first on, with
// their done and failed counts.
func minutes(first int64, counts ...[2]int64) []broker.Minute {
	out := make([]broker.Minute, len(counts))
	for i, c := range counts {
		out[i] = broker.Minute{Start: time.UnixMilli((first + int64(i)) * 60_000), Done: c[0], Failed: c[1]}
	}
	return out
}

// The counters add what each minute gained since the scrape before:
// nothing on the first scrape (its baseline), the growth of the minute
// read last, every later minute whole, and nothing twice however often
// the same minutes are read.
func TestQueueTotalsAddWhatTheMinutesGained(t *testing.T) {
	t0 := time.Now()
	var q queueTotals
	if n := q.minutesToRead(t0); n != 1 {
		t.Fatalf("the first scrape reads %d minutes, want 1", n)
	}
	q.add(minutes(100, [2]int64{40, 3}), t0) // 40 done before this process looked
	if q.done != 0 || q.failed != 0 {
		t.Fatalf("after the baseline: done %d failed %d, want 0 0", q.done, q.failed)
	}
	// 15 s later, the same minute has grown.
	t1 := t0.Add(15 * time.Second)
	if n := q.minutesToRead(t1); n != 2 {
		t.Fatalf("a scrape 15 s later reads %d minutes, want 2", n)
	}
	q.add(minutes(99, [2]int64{7, 7}, [2]int64{45, 4}), t1) // minute 99 was counted before the baseline
	if q.done != 5 || q.failed != 1 {
		t.Fatalf("done %d failed %d, want 5 1", q.done, q.failed)
	}
	// Read again without change: nothing more.
	q.add(minutes(99, [2]int64{7, 7}, [2]int64{45, 4}), t1)
	if q.done != 5 || q.failed != 1 {
		t.Fatalf("the same minutes read twice: done %d failed %d, want 5 1", q.done, q.failed)
	}
	// Four minutes later: minute 100 grew by 5, 101-103 are new, 104 is current.
	t2 := t1.Add(4 * time.Minute)
	if n := q.minutesToRead(t2); n != 6 {
		t.Fatalf("a scrape 4 min later reads %d minutes, want 6", n)
	}
	q.add(minutes(99, [2]int64{7, 7}, [2]int64{50, 4}, [2]int64{10, 0}, [2]int64{0, 0}, [2]int64{20, 2}, [2]int64{1, 1}), t2)
	if q.done != 5+5+10+20+1 || q.failed != 1+2+1 {
		t.Fatalf("done %d failed %d, want 41 4", q.done, q.failed)
	}
	// A clock gone back (a failover to a server behind): nothing counted,
	// the minutes start again from there.
	q.add(minutes(90, [2]int64{500, 500}), t2.Add(time.Minute))
	if q.done != 41 || q.failed != 4 || q.minute != 90 {
		t.Fatalf("after the clock went back: done %d failed %d minute %d, want 41 4 90", q.done, q.failed, q.minute)
	}
	// A minute whose count went down (the stats hash emptied) counts nothing.
	q.add(minutes(90, [2]int64{2, 0}), t2.Add(2*time.Minute))
	if q.done != 41 {
		t.Fatalf("a minute that went down added: done %d, want 41", q.done)
	}
	// Hours without a scrape read at most what Redis keeps.
	if n := q.minutesToRead(t2.Add(30 * time.Hour)); n != maxMinutes {
		t.Fatalf("a scrape 30 h later reads %d minutes, want %d", n, maxMinutes)
	}
}

// Deaths count from the first scrape's newest on, and a retried newest
// death (the index's newest goes back) counts nothing again.
func TestQueueTotalsDead(t *testing.T) {
	var q queueTotals
	q.addDead(7, 1000) // baseline: 7 dead before
	q.addDead(2, 1200)
	q.addDead(0, 900) // the two retried: the newest is older
	if q.dead != 2 || q.deadAfter != 1200 {
		t.Fatalf("dead %d after %d, want 2 1200", q.dead, q.deadAfter)
	}
}
