package brokertest

import (
	"slices"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// A claim writes its request's record (SET NX) after its pop, so a send
// that finds the record puts back what it popped: every job in ready again
// at its place (priority, then FIFO), none claimed, and the request
// answers the first send's leases.
func testResendPutsBackWhatItPopped(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	first := s.enqueue(t, broker.Job{ID: "first"})
	req := broker.NewRequestID()
	res, err := s.b.Leases().ClaimRequest(s.ctx, req, s.q, 1, long)
	noErr(t, "ClaimRequest", err)
	if len(res.Leases) != 1 || res.Leases[0].ID != first {
		t.Fatalf("first send took %+v", res.Leases)
	}
	for i, p := range []int{0, 5, 0, -3} {
		s.enqueue(t, broker.Job{ID: string(rune('a' + i)), Priority: p})
	}
	again, err := s.b.Leases().ClaimRequest(s.ctx, req, s.q, 3, long)
	noErr(t, "ClaimRequest sent again", err)
	if len(again.Leases) != 1 || again.Leases[0].ClaimID() != res.Leases[0].ClaimID() {
		t.Fatalf("the re-send answered %+v; want the first send's lease %+v", again.Leases, res.Leases[0])
	}
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "pending after the re-send", c.Pending, int64(4))
	var got []string
	for _, l := range s.claim(t, 10, long) {
		got = append(got, l.ID)
	}
	if w := []string{"b", "a", "c", "d"}; !slices.Equal(got, w) {
		t.Fatalf("claim order after the re-send put jobs back: %v, want %v", got, w)
	}
	s.consistent(t)
}
