package brokertest

// The model test's view of Redis time. Unique keys with a TTL, retention
// by age and the rate limit all turn on when a script ran, which the model
// learns by reading TIME around the request.

// span is the Redis time, in milliseconds, at which a step's scripts ran:
// TIME read before the request and after its answer. On a frozen clock
// (Backend.Frozen) it is one instant, and the model is exact at every
// boundary. On a real server it is widened by clockSlack: Redis bases a
// key's PX or PEXPIRE on its own clock, a moment apart from the TIME the
// script read, and judges expiry in a script by the script's start, so a
// boundary that falls inside the span may go either way.
type span struct{ lo, hi int64 }

// clockSlack is that moment, in milliseconds, with room for a loaded
// machine that stops Redis in the middle of a script.
const clockSlack = 5

// tri is an answer that a boundary inside a span leaves open.
type tri int

const (
	no tri = iota
	perhaps
	yes
)

// not turns yes into no and back; perhaps stays.
func (x tri) not() tri { return yes - x }

// reached says whether the scripts of the span ran at or after at.
func (s span) reached(at int64) tri {
	switch {
	case s.lo >= at:
		return yes
	case s.hi < at:
		return no
	}
	return perhaps
}

// redisTime reads the server's clock in milliseconds, as lib.lua's now_ms.
func (s *bundle) redisTime(t failer) int64 {
	t.Helper()
	tm, err := s.Client.Time(s.ctx).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return tm.UnixMilli()
}

// begin opens the span of a step's request: call it just before.
func (m *model) begin(t failer) {
	n := m.s.redisTime(t)
	m.now = span{n, n}
}

// end closes it: call it once the answer is in.
func (m *model) end(t failer) {
	m.now.hi = m.s.redisTime(t)
	m.now = m.widen(m.now)
}

// widen adds the slack a real server's clock needs.
func (m *model) widen(s span) span {
	if !m.s.Frozen {
		s.lo, s.hi = s.lo-clockSlack, s.hi+clockSlack
	}
	return s
}

// within checks a time a script wrote against the span it ran in.
func (m *model) within(t failer, what string, s span, at int64) {
	t.Helper()
	if at < s.lo || at > s.hi {
		t.Fatalf("%s is %d, outside the Redis time %d..%d of its step", what, at, s.lo, s.hi)
	}
}
