package main

import (
	"strings"
	"testing"
)

// `workerd limit q --max-running 3 --rate 5` on a queue without a rate
// window: the command fails with a usage error (exit 2, Rate and Per go
// together), yet it has already set the running limit. A refused command
// must change nothing: the operator reads "usage error", fixes the flags,
// and never learns that the first half went through.
func TestRedteam3LimitRefusedChangesNothing(t *testing.T) {
	c := newCLI(t)
	c.ok("", "limit", "q", "--clear")
	code, _, errOut := c.run("", "limit", "q", "--max-running", "3", "--rate", "5")
	if code != 2 {
		t.Fatalf("workerd limit q --max-running 3 --rate 5: exit %d (%q); want 2", code, errOut)
	}
	if out := c.ok("", "limit", "q"); !strings.Contains(out, "no limits") {
		t.Fatalf("after a refused workerd limit the queue has %q; want no limits", strings.TrimSpace(out))
	}
}
