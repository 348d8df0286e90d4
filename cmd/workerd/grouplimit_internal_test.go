package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]struct {
		n   int
		per time.Duration
	}{
		"10/1s": {10, time.Second}, "100/1m": {100, time.Minute}, "5/s": {5, time.Second},
		"3/h": {3, time.Hour}, " 7 / 250ms ": {7, 250 * time.Millisecond}, "1/1ms": {1, time.Millisecond},
	} {
		n, per, err := parseRate(strings.TrimSpace(in))
		if err != nil || n != want.n || per != want.per {
			t.Errorf("parseRate(%q) = %d, %v, %v; want %d, %v", in, n, per, err, want.n, want.per)
		}
	}
	for _, in := range []string{"10", "10/", "/1s", "0/1s", "-1/1s", "x/1s", "10/0s", "10/500us", "10/soon", "10/-1s", "1.5/1s"} {
		if _, _, err := parseRate(in); err == nil || !strings.Contains(err.Error(), "N/PERIOD") {
			t.Errorf("parseRate(%q) = %v; want an error saying how to write it", in, err)
		}
	}
}
