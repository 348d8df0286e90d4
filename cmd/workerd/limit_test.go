package main

import (
	"strings"
	"testing"
)

// `workerd limit q --max-running 3 --rate 5` on a queue without a rate
// window is a usage error (exit 2, Rate and Per go together), and a refused
// command changes nothing: it once set the running limit before refusing
// the rate, so the operator never learned the first half went through.
func TestLimitRefusedChangesNothing(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "q", "k")
	code, _, errOut := c.run("", "limit", "q", "--max-running", "3", "--rate", "5")
	if code != 2 {
		t.Fatalf("workerd limit q --max-running 3 --rate 5: exit %d (%q); want 2", code, errOut)
	}
	if out := c.ok("", "limit", "q"); !strings.Contains(out, "no limits") {
		t.Fatalf("after a refused workerd limit the queue has %q; want no limits", strings.TrimSpace(out))
	}
}
