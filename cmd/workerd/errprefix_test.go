package main

import (
	"strings"
	"testing"
)

// An error carries one prefix, workerd's: the library's "fenceq: " is not
// repeated after it.
func TestErrorHasOnePrefix(t *testing.T) {
	c := newCLI(t)
	id := strings.TrimSpace(c.ok("", "enqueue", "mail", "welcome"))
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"retry", "mail", id}, 1, "workerd retry: job " + `"` + id + `" in queue "mail" is pending; only dead or cancelled jobs can be retried`},
		{[]string{"retry", "mail", "nosuch"}, 1, `workerd retry: job "nosuch" in queue "mail": job not found`},
		{[]string{"cancel", "mail", "nosuch"}, 1, `workerd cancel: job "nosuch" in queue "mail": job not found`},
		{[]string{"release", "mail", "nosuch"}, 1, `workerd release: job "nosuch" in queue "mail": job not found`},
		{[]string{"enqueue", "mail", "welcome", "--priority", "1000"}, 2, `workerd enqueue: invalid priority "1000": must be between -100 and 100`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := c.run("", tc.args...)
			first, _, _ := strings.Cut(errOut, "\n")
			if code != tc.code || out != "" || first != tc.want || strings.Contains(errOut, "fenceq:") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d, nothing, and first line %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}
}

func TestOnePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"fenceq: job x: job not found":          "job x: job not found",
		"read the jobs: fenceq: enqueue: boom":  "read the jobs: enqueue: boom",
		"cannot reach Redis at 127.0.0.1:1: no": "cannot reach Redis at 127.0.0.1:1: no",
	} {
		if got := onePrefix(errString(in)); got != want {
			t.Errorf("onePrefix(%q) = %q; want %q", in, got, want)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }
