package worker

import (
	"fmt"
	"testing"
)

// The unknown-kind warning passes once per kind and period, and a flood of
// new kinds (they come from whoever enqueues) keeps a bounded map.
func TestKindThrottle(t *testing.T) {
	var k kindThrottle
	if _, ok := k.ok("a"); !ok {
		t.Fatal("the first line of a kind was held back")
	}
	for range 1000 {
		if _, ok := k.ok("a"); ok {
			t.Fatal("a second line of a kind passed within the period")
		}
	}
	if _, ok := k.ok("b"); !ok {
		t.Fatal("another kind's first line was held back")
	}
	if held := k.kinds["a"].held; held != 1000 {
		t.Fatalf("held back %d lines of kind a, want 1000", held)
	}
	for i := range 100_000 {
		k.ok(fmt.Sprint("kind-", i))
	}
	if n := len(k.kinds); n > kindsKept {
		t.Fatalf("kept %d kinds, want at most %d", n, kindsKept)
	}
}
