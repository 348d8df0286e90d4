package broker

import (
	"testing"
	"time"
)

// Redis reads a blocking timeout of 0 as "block forever": a short slice
// must round up, never down to "0.000".
func TestBlockSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0.001"}, {-time.Second, "0.001"}, {300 * time.Microsecond, "0.001"},
		{time.Millisecond, "0.001"}, {1500 * time.Microsecond, "0.002"}, {1500 * time.Millisecond, "1.500"},
	} {
		if got := blockSeconds(tc.d); got != tc.want {
			t.Errorf("blockSeconds(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
