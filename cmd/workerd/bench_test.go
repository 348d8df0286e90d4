package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// benchPrefix is the prefix a bench run announced on standard error.
func benchPrefix(t *testing.T, stderr string) string {
	t.Helper()
	m := regexp.MustCompile(`writing only keys under (fenceq-bench-[0-9a-f]{8}):`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("bench did not say which prefix it writes under:\n%s", stderr)
	}
	return m[1]
}

// bench touches only keys of its own and deletes them also when it fails
// half-way: miniredis has no INFO memory, so the bench stops in its third
// phase with a queue of its own written.
func TestBenchFailingDeletesOnlyItsOwnKeys(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "q", "k", "--id", "mine")
	if err := c.mr.Set("someone-else", "keep me"); err != nil {
		t.Fatal(err)
	}
	before := c.mr.Keys()
	code, _, errOut := c.run("", "bench", "--jobs", "40")
	if code != 1 || !strings.Contains(errOut, "memory") {
		t.Fatalf("exit %d, want 1 from the memory phase:\n%s", code, errOut)
	}
	prefix := benchPrefix(t, errOut)
	if after := c.mr.Keys(); !slices.Equal(after, before) {
		t.Fatalf("keys before the bench %v, after %v (bench wrote under %s)", before, after, prefix)
	}
	if v, _ := c.mr.Get("someone-else"); v != "keep me" {
		t.Fatalf("a key that is not bench's: %q", v)
	}
}

// Soak flags that cannot run are usage errors, named, before bench
// connects to anything.
func TestBenchSoakUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--soak-concurrency", "10"}, "--soak-concurrency applies to a soak: give --soak DURATION too"},
		{[]string{"--retention", "age-only"}, "--retention applies to a soak"},
		{[]string{"--soak", "1m", "--jobs", "10"}, "--jobs sizes the measurements that --soak replaces"},
		{[]string{"--soak", "-1s"}, "--soak -1s: must be positive"},
		{[]string{"--soak", "1m", "--soak-concurrency", "0"}, "--soak-concurrency 0: must be at least 1"},
		{[]string{"--soak", "1m", "--soak-backlog", "0"}, "--soak-backlog 0: must be at least 1"},
		{[]string{"--soak", "10s", "--soak-every", "5s"}, "at most a quarter of --soak 10s"},
		{[]string{"--soak", "1m", "--retention", "24h"}, `--retention "24h": want default (the pool's defaults) or age-only`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runBare(append([]string{"bench", "--redis", "127.0.0.1:1"}, tc.args...)...)
			if code != 2 || out != "" || !strings.HasPrefix(errOut, "workerd bench: ") || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and a usage error saying %q", code, out, errOut, tc.want)
			}
		})
	}
}

// --groups flags that cannot run are usage errors, named, before bench
// connects to anything.
func TestBenchGroupsUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--groups-rounds", "5"}, "--groups-rounds applies to --groups: give --groups N too"},
		{[]string{"--groups", "0"}, "--groups 0: must be at least 1"},
		{[]string{"--groups", "10", "--groups-rounds", "0"}, "--groups-rounds 0: must be at least 1"},
		{[]string{"--groups", "10", "--soak", "1m"}, "--groups and --soak each replace the measurements"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runBare(append([]string{"bench", "--redis", "127.0.0.1:1"}, tc.args...)...)
			if code != 2 || out != "" || !strings.HasPrefix(errOut, "workerd bench: ") || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and a usage error saying %q", code, out, errOut, tc.want)
			}
		})
	}
}
