package brokertest

import (
	"slices"
	"time"

	"pgregory.net/rapid"

	"github.com/fenceq/fenceq/broker"
)

// overview reads Overview and checks what it says holds the queue back
// against the model: the limits, the starts the rate counts now, and, when
// they use up the rate, the wait until the oldest of them leaves the
// window. Its script writes nothing, so a lost reply only repeats it.
func (m *model) overview(t *rapid.T) {
	ctx := m.lostReply(t)
	m.begin(t)
	o, err := m.s.b.Inspector().Overview(ctx, m.s.q)
	m.end(t)
	noErr(t, "Overview", err)
	want(t, "Overview's limits", o.Limits, broker.Limits{MaxRunning: m.maxRunning, Rate: m.rate, Per: time.Duration(m.per) * time.Millisecond})
	want(t, "Overview's paused", o.Paused, m.paused)
	if m.rate == 0 {
		want(t, "Overview's starts without a rate", o.Started, 0)
		want(t, "Overview's next start without a rate", o.NextStart, 0)
		return
	}
	// A start counts while it is within the last period; once the key
	// expired (a period after the last claim, by that claim's period) none
	// does.
	expired := m.now.reached(m.startsTTL)
	var least, most int64
	var counted []int64 // the starts that may be in the window, oldest first
	for _, st := range m.starts {
		switch max(expired, m.now.reached(st+m.per)) {
		case no:
			least++
			most++
			counted = append(counted, st)
		case perhaps:
			most++
			counted = append(counted, st)
		}
	}
	slices.Sort(counted)
	if o.Started < least || o.Started > most {
		t.Fatalf("Overview counts %d starts in the window at %d..%d; the model has %d..%d of %v (period %d ms)", o.Started, m.now.lo, m.now.hi, least, most, m.starts, m.per)
	}
	next := o.NextStart.Milliseconds()
	if o.Started < int64(m.rate) {
		want(t, "Overview's next start with the rate not used up", o.NextStart, 0)
		return
	}
	if next < 1 || next > m.per {
		t.Fatalf("Overview's next start in %d ms with %d of %d starts per %d ms", next, o.Started, m.rate, m.per)
	}
	// The window holds the newest Started of those; the wait ends when the
	// rate-th newest leaves it (at least 1 ms from the overview's time).
	st := counted[len(counted)-m.rate]
	if at := st + m.per - next; !(at >= m.now.lo && at <= m.now.hi || next == 1 && at <= m.now.hi) {
		t.Fatalf("Overview's next start in %d ms at %d..%d; the %d-th newest start of %v ends its window at %d (period %d ms)",
			next, m.now.lo, m.now.hi, m.rate, counted, st+m.per, m.per)
	}
}
