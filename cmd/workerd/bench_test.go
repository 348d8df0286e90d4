package main

import (
	"encoding/json"
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

// The --json field names are read by other tools: the same names, always.
func TestBenchJSONFieldNames(t *testing.T) {
	b, err := json.Marshal(benchResult{ProcessByConcurrent: map[string]procRun{"1": {}}})
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	var names []string
	for k := range top {
		names = append(names, k)
	}
	slices.Sort(names)
	want := []string{"bytes_per_pending_job", "ceiling_fraction", "commands_per_job", "enqueue_batch_per_s", "enqueue_batcher_c50_mean_batch",
		"enqueue_batcher_c50_per_s", "enqueue_single_c50_per_s", "enqueue_single_per_s", "idle_pickup_max_ms", "idle_pickup_p50_ms",
		"idle_pickup_p99_ms", "jobs", "loaded_pickup_max_ms", "loaded_pickup_p50_ms", "loaded_pickup_p99_ms", "process_by_concurrency",
		"process_by_payload", "process_per_s", "redis_ceiling_per_s", "round_trips_per_job"}
	if !slices.Equal(names, want) {
		t.Errorf("bench --json fields\n%v\nwant\n%v", names, want)
	}
	var run map[string]map[string]any
	if err := json.Unmarshal(top["process_by_concurrency"], &run); err != nil {
		t.Fatal(err)
	}
	if len(run["1"]) != 3 || run["1"]["per_s"] == nil || run["1"]["round_trips_per_job"] == nil || run["1"]["commands_per_job"] == nil {
		t.Errorf("process_by_concurrency entries: %v", run["1"])
	}
}
