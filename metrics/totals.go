package metrics

import (
	"time"

	"github.com/fenceq/fenceq/broker"
)

// queueTotals turns what Redis keeps of a queue's settlements into
// counters: the per-minute done and failed counts of the last six hours
// (broker.Throughput), and the dead index scored by the time of death
// (broker.DeadSince). Each scrape adds what the minutes gained since the
// one before, so the counters start at 0 on this process's first scrape
// and count every pool's jobs, whichever process ran them. No job pays a
// command for them: the settling scripts count the minutes anyway.
type queueTotals struct {
	done, failed, dead int64

	read     bool      // a scrape has read the queue
	minute   int64     // the newest minute read (minutes since the epoch, Redis time)
	atDone   int64     // that minute's counts when it was read
	atFailed int64     //
	readAt   time.Time // when, on this process's clock
	// deadAfter is the score of the newest dead job seen: DeadSince
	// counts the deaths after it.
	deadAfter int64
	deadRead  bool
}

// maxMinutes is how many minutes Throughput keeps, and so the most a
// scrape reads.
const maxMinutes = int(broker.ThroughputKept / time.Minute)

// minutesToRead is how many of the latest minutes a scrape at now reads:
// those since the last scrape, and the one it read last (which may have
// grown since), or one (the baseline) the first time.
func (t *queueTotals) minutesToRead(now time.Time) int {
	if !t.read {
		return 1
	}
	n := int(now.Sub(t.readAt)/time.Minute) + 2 // the minute last read, and the current one
	return max(1, min(n, maxMinutes))
}

// add counts what the minutes read (oldest first, the current minute
// last) gained since the last scrape. A minute before the one last read
// is already counted; one whose count went down (the stats hash was
// emptied by a clock that jumped) counts nothing, and neither does a
// clock gone back: the minutes start again from there.
func (t *queueTotals) add(ms []broker.Minute, now time.Time) {
	if len(ms) == 0 {
		return
	}
	last := ms[len(ms)-1]
	cur := minuteOf(last)
	if t.read && cur >= t.minute {
		for _, m := range ms {
			switch at := minuteOf(m); {
			case at == t.minute:
				t.done += max(0, m.Done-t.atDone)
				t.failed += max(0, m.Failed-t.atFailed)
			case at > t.minute:
				t.done += m.Done
				t.failed += m.Failed
			}
		}
	}
	t.read, t.minute, t.atDone, t.atFailed, t.readAt = true, cur, last.Done, last.Failed, now
}

// addDead counts the deaths DeadSince found after the last scrape's
// newest, the first scrape's being the baseline.
func (t *queueTotals) addDead(n, newest int64) {
	if t.deadRead {
		t.dead += n
	}
	t.deadRead = true
	t.deadAfter = max(t.deadAfter, newest)
}

func minuteOf(m broker.Minute) int64 { return m.Start.UnixMilli() / time.Minute.Milliseconds() }
