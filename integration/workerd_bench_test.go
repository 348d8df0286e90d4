package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchNeighbours writes keys that are not bench's into its database — one
// of them shaped like another bench run's — and answers a check that they
// are all still there.
func benchNeighbours(t *testing.T) func() {
	t.Helper()
	c := client(t)
	ctx := context.Background()
	tag := time.Now().UnixNano()
	keys := map[string]string{
		fmt.Sprintf("someone-else-%d", tag):                   "keep me",
		fmt.Sprintf("fenceq-bench-another-%d:{q}:job:x", tag): "another bench run's",
	}
	for k, v := range keys {
		if err := c.Set(ctx, k, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Del(context.Background(), k) })
	}
	return func() {
		t.Helper()
		for k, v := range keys {
			if got, err := c.Get(ctx, k).Result(); got != v {
				t.Errorf("key %s, not bench's: %q (%v); want %q", k, got, err, v)
			}
		}
	}
}

var benchPrefixRE = regexp.MustCompile(`writing only keys under (fenceq-bench-[0-9a-f]{8}):`)

// prefixKeys lists the keys under prefix, with SCAN as bench deletes them.
func prefixKeys(t *testing.T, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	iter := client(t).Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// workerd bench runs against a database that holds other data: it writes
// only under a prefix of its own and deletes it when done, with its --json
// fields as scripts know them.
func TestWorkerdBenchTouchesOnlyItsOwnKeys(t *testing.T) {
	neighboursKept := benchNeighbours(t)
	code, out, errOut := workerd(t, "", "bench", "--redis", "redis://"+redisAddr, "--jobs", "200", "--json")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, errOut)
	}
	m := benchPrefixRE.FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("bench did not say which prefix it writes under:\n%s", errOut)
	}
	if keys := prefixKeys(t, m[1]); len(keys) > 0 {
		t.Errorf("bench left %d keys under %s, e.g. %s", len(keys), m[1], keys[0])
	}
	neighboursKept()
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	for _, f := range []string{"jobs", "redis_ceiling_per_s", "process_per_s", "round_trips_per_job", "idle_pickup_p50_ms", "bytes_per_pending_job"} {
		if v, ok := r[f].(float64); !ok || v <= 0 {
			t.Errorf("bench --json: %s is %v", f, r[f])
		}
	}
}

// Interrupted (Ctrl-C) while its keys exist, bench still deletes them, and
// only them.
func TestWorkerdBenchInterruptedDeletesItsKeys(t *testing.T) {
	neighboursKept := benchNeighbours(t)
	// Enough jobs that the enqueue phase outlasts the wait for its keys.
	cmd := exec.Command(workerdBin(t), "bench", "--redis", "redis://"+redisAddr, "--jobs", "200000")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := bufio.NewScanner(stderr)
	var prefix string
	var said strings.Builder
	for prefix == "" && lines.Scan() {
		said.WriteString(lines.Text() + "\n")
		if m := benchPrefixRE.FindStringSubmatch(lines.Text()); m != nil {
			prefix = m[1]
		}
	}
	if prefix == "" {
		t.Fatalf("bench did not say which prefix it writes under:\n%s", said.String())
	}
	rest := make(chan string)
	go func() {
		var b strings.Builder
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		rest <- b.String()
	}()
	for deadline := time.Now().Add(time.Minute); len(prefixKeys(t, prefix)) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("bench wrote no key under %s within a minute", prefix)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	said.WriteString(<-rest)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(said.String(), "interrupted") {
		t.Fatalf("bench after SIGINT: %v, want exit 1 saying it was interrupted\n%s", err, said.String())
	}
	if keys := prefixKeys(t, prefix); len(keys) > 0 {
		t.Errorf("bench left %d keys under %s after SIGINT, e.g. %s", len(keys), prefix, keys[0])
	}
	neighboursKept()
}
