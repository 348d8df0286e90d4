package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
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
	t.Run("measuring", func(t *testing.T) {
		// Enough jobs that the enqueue phase outlasts the wait for its keys.
		interruptBench(t, "--jobs", "200000")
	})
	t.Run("soaking", func(t *testing.T) {
		// Producers and a pool write while it is interrupted.
		interruptBench(t, "--soak", "10m")
	})
}

// interruptBench starts bench with args, sends it SIGINT once its keys
// exist, and checks that it deleted them, and only them.
func interruptBench(t *testing.T, args ...string) {
	neighboursKept := benchNeighbours(t)
	cmd := exec.Command(workerdBin(t), append([]string{"bench", "--redis", "redis://" + redisAddr}, args...)...)
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

// A short soak answers its memory figures, samples them as often as asked,
// keeps its producers near their backlog, and deletes its keys when done.
func TestWorkerdBenchSoak(t *testing.T) {
	neighboursKept := benchNeighbours(t)
	code, out, errOut := workerd(t, "", "bench", "--redis", "redis://"+redisAddr, "--soak", "2s", "--soak-every", "250ms",
		"--soak-concurrency", "20", "--soak-backlog", "2000", "--retention", "age-only", "--json")
	if code != 0 {
		t.Fatalf("bench --soak: exit %d\n%s", code, errOut)
	}
	m := benchPrefixRE.FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("bench did not say which prefix it writes under:\n%s", errOut)
	}
	if keys := prefixKeys(t, m[1]); len(keys) > 0 {
		t.Errorf("bench --soak left %d keys under %s, e.g. %s", len(keys), m[1], keys[0])
	}
	neighboursKept()
	var r struct {
		DurationS   float64  `json:"soak_duration_s"`
		Concurrency int      `json:"soak_concurrency"`
		Retention   string   `json:"soak_retention"`
		Backlog     int64    `json:"soak_backlog_target"`
		Done        int64    `json:"soak_done"`
		JobsPerS    float64  `json:"soak_jobs_per_s"`
		Slope       *float64 `json:"soak_memory_slope_bytes_per_s"`
		PerJob      *float64 `json:"soak_memory_slope_bytes_per_job"`
		HalfPerS    float64  `json:"soak_second_half_jobs_per_s"`
		Peak        int64    `json:"soak_memory_peak_bytes"`
		Start       int64    `json:"soak_memory_start_bytes"`
		CPUS        float64  `json:"soak_redis_cpu_s"`
		CPUPerJob   float64  `json:"soak_redis_cpu_us_per_job"`
		Samples     []struct {
			ElapsedS   float64 `json:"elapsed_s"`
			UsedMemory int64   `json:"used_memory"`
			Done       int64   `json:"done"`
			Backlog    int64   `json:"backlog"`
			Kept       int64   `json:"kept"`
		} `json:"soak_samples"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bench --soak --json: %v\n%s", err, out)
	}
	if r.DurationS != 2 || r.Concurrency != 20 || r.Retention != "age-only" || r.Backlog != 2000 {
		t.Errorf("settings echoed: %+v", r)
	}
	// A sample at the start, then one every 250ms until 2s.
	if n := len(r.Samples); n != 9 {
		t.Fatalf("%d samples, want 9: %+v", n, r.Samples)
	}
	last := r.Samples[len(r.Samples)-1]
	if r.Samples[0].ElapsedS >= 0.25 || r.Samples[0].Done != 0 || last.ElapsedS < 2 || last.Done != r.Done {
		t.Errorf("samples from %+v to %+v; want from nothing done at the start to soak_done at 2s", r.Samples[0], last)
	}
	if r.Done < 1 || r.JobsPerS <= 0 || r.HalfPerS <= 0 || r.Slope == nil || r.PerJob == nil || r.Start < 1 || r.Peak < r.Start {
		t.Errorf("done %d, jobs/s %v (second half %v), slope %v (%v per job), used_memory from %d to a peak of %d",
			r.Done, r.JobsPerS, r.HalfPerS, r.Slope, r.PerJob, r.Start, r.Peak)
	}
	// The shared Redis serves other tests meanwhile: Redis's CPU per job
	// is only checked to be there, and to be the CPU over the jobs done.
	if r.CPUS <= 0 || r.Done > 0 && math.Abs(r.CPUPerJob-r.CPUS*1e6/float64(r.Done)) > 1e-6*r.CPUPerJob {
		t.Errorf("Redis CPU %v s, %v µs a job over %d jobs", r.CPUS, r.CPUPerJob, r.Done)
	}
	for i, s := range r.Samples {
		if s.UsedMemory < 1 || s.UsedMemory > r.Peak {
			t.Errorf("sample %d: used_memory %d, peak %d", i, s.UsedMemory, r.Peak)
		}
		// Four producers, each at most a batch of 500 past the target.
		if s.Backlog < 0 || s.Backlog > r.Backlog+4*500 {
			t.Errorf("sample %d: backlog %d, want 0 to %d", i, s.Backlog, r.Backlog+4*500)
		}
		// Age-only retention keeps every job finished in 2s.
		if s.Kept > s.Done {
			t.Errorf("sample %d: %d finished jobs kept of %d done", i, s.Kept, s.Done)
		}
		if i > 0 && (s.ElapsedS <= r.Samples[i-1].ElapsedS || s.Done < r.Samples[i-1].Done) {
			t.Errorf("sample %d goes back: %+v after %+v", i, s, r.Samples[i-1])
		}
	}
}
