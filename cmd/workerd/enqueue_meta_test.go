package main

import (
	"maps"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// --meta KEY=VALUE reaches the job's metadata, and inspect job shows it in
// both forms; a malformed or oversized --meta is a usage error.
func TestEnqueueMeta(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "mail", "welcome", "--id", "m-1", "--meta", "tenant=acme", "--meta", "note=a=b c", "--meta", "tab=x\ty")
	want := map[string]string{"tenant": "acme", "note": "a=b c", "tab": "x\ty"}
	if got := c.job("mail", "m-1").Metadata; !maps.Equal(got, want) {
		t.Fatalf("inspect --json metadata = %v, want %v", got, want)
	}
	text := c.ok("", "inspect", "job", "mail", "m-1")
	for _, line := range []string{"metadata    note=a=b c\n", "\n            tab=\"x\\ty\"\n", "\n            tenant=acme\n"} {
		if !strings.Contains(text, line) {
			t.Errorf("inspect job text lacks %q:\n%s", line, text)
		}
	}
	c.ok("", "enqueue", "mail", "welcome", "--id", "m-2")
	if got := c.job("mail", "m-2").Metadata; got != nil {
		t.Fatalf("metadata of a job enqueued without --meta: %v", got)
	}
	if text := c.ok("", "inspect", "job", "mail", "m-2"); strings.Contains(text, "metadata") {
		t.Fatalf("inspect job shows metadata for a job without any:\n%s", text)
	}

	for _, tc := range []struct{ arg, want string }{
		{"tenant", "no '='"},
		{"=acme", "empty key"},
		{"k=" + strings.Repeat("v", broker.MaxMetadataBytes), "put large data in the payload"},
	} {
		code, _, errOut := c.run("", "enqueue", "mail", "welcome", "--id", "bad", "--meta", tc.arg)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("--meta %.20q: exit %d, stderr %q; want 2 and %q", tc.arg, code, errOut, tc.want)
		}
	}
	code, _, errOut := c.run("", "enqueue", "mail", "welcome", "--meta", "k=1", "--meta", "k=2")
	if code != 2 || !strings.Contains(errOut, "given twice") {
		t.Errorf("--meta given twice: exit %d, stderr %q", code, errOut)
	}
}
