package bench

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// The --json field names are read by other tools: the same names, always.
func TestBenchJSONFieldNames(t *testing.T) {
	b, err := json.Marshal(Result{ProcessByConcurrent: map[string]ProcRun{"1": {}}})
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

// The soak's --json field names are read by other tools too.
func TestBenchSoakJSONFieldNames(t *testing.T) {
	b, err := json.Marshal(SoakResult{Samples: []SoakSample{{}}})
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	want := []string{"soak_backlog_target", "soak_concurrency", "soak_done", "soak_duration_s", "soak_jobs_per_s",
		"soak_memory_peak_bytes", "soak_memory_slope_bytes_per_job", "soak_memory_slope_bytes_per_s", "soak_memory_start_bytes",
		"soak_redis_cpu_s", "soak_redis_cpu_us_per_job", "soak_retention", "soak_samples", "soak_second_half_jobs_per_s"}
	if names := slices.Sorted(maps.Keys(top)); !slices.Equal(names, want) {
		t.Errorf("bench --soak --json fields\n%v\nwant\n%v", names, want)
	}
	var samples []map[string]any
	if err := json.Unmarshal(top["soak_samples"], &samples); err != nil {
		t.Fatal(err)
	}
	wantSample := []string{"backlog", "done", "elapsed_s", "jobs_per_s", "kept", "used_memory"}
	if names := slices.Sorted(maps.Keys(samples[0])); !slices.Equal(names, wantSample) {
		t.Errorf("soak_samples entries\n%v\nwant\n%v", names, wantSample)
	}
}

// Redis's CPU per job is the CPU it used from the first sample to the
// last (user and system, from INFO cpu) over the jobs done meanwhile.
func TestSoakRedisCPUPerJob(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:2.250000\r\nused_cpu_user:10.500000\r\n" +
		"used_cpu_sys_children:0.000000\r\nused_cpu_user_children:0.000000\r\n" +
		"used_cpu_sys_main_thread:2.000000\r\nused_cpu_user_main_thread:10.000000\r\n"
	start, err := redisCPU(info)
	if err != nil || start != 12.75 {
		t.Fatalf("redisCPU = %v, %v; want 12.75 (user 10.5 + sys 2.25)", start, err)
	}
	for _, bad := range []string{"# CPU\r\nused_cpu_user:1.0\r\n", "used_cpu_sys:x\r\nused_cpu_user:1\r\n"} {
		if _, err := redisCPU(bad); err == nil {
			t.Errorf("redisCPU(%q) answered no error", bad)
		}
	}
	r := SoakResult{Samples: []SoakSample{
		{ElapsedS: 0.01, redisCPU: start},
		{ElapsedS: 30, Done: 300_000, redisCPU: start + 10},
		{ElapsedS: 60, Done: 600_000, redisCPU: start + 21.9},
	}}
	if err := r.summarize(time.Minute); err != nil {
		t.Fatal(err)
	}
	// 21.9 s of CPU over 600,000 jobs: 36.5 µs a job.
	if math.Abs(r.RedisCPUS-21.9) > 1e-9 || math.Abs(r.RedisCPUUsPerJob-36.5) > 1e-9 {
		t.Errorf("Redis CPU %v s, %v µs a job; want 21.9 s, 36.5 µs", r.RedisCPUS, r.RedisCPUUsPerJob)
	}
	var out strings.Builder
	printSoak(&out, r)
	if !strings.Contains(out.String(), "Redis CPU per job      36.5 µs (21.90 s") {
		t.Errorf("the human output does not give Redis's CPU per job:\n%s", out.String())
	}
	r = SoakResult{Samples: []SoakSample{{ElapsedS: 0.01, redisCPU: 1}, {ElapsedS: 1, redisCPU: 1.5}, {ElapsedS: 2, redisCPU: 2}}}
	if err := r.summarize(2 * time.Second); err != nil || r.RedisCPUUsPerJob != 0 {
		t.Errorf("no job done: %v µs a job (%v), want 0", r.RedisCPUUsPerJob, err)
	}
}

func TestSlope(t *testing.T) {
	t.Run("a straight line is its own slope", func(t *testing.T) {
		xs := []float64{150, 155, 160, 170, 180}
		var ys []float64
		for _, x := range xs {
			ys = append(ys, 6_800_000*x+1e9)
		}
		if got, ok := slope(xs, ys); !ok || math.Abs(got-6_800_000) > 1e-3 {
			t.Errorf("slope %v (%v), want 6800000", got, ok)
		}
	})
	t.Run("scattered points: the least-squares line", func(t *testing.T) {
		// mean (1.5, 1.5); Σ dx·dy = 4, Σ dx² = 5.
		if got, ok := slope([]float64{0, 1, 2, 3}, []float64{0, 2, 1, 3}); !ok || math.Abs(got-0.8) > 1e-12 {
			t.Errorf("slope %v (%v), want 0.8", got, ok)
		}
	})
	t.Run("a level that goes up and comes back has no slope", func(t *testing.T) {
		if got, ok := slope([]float64{0, 1, 2, 3, 4}, []float64{10, 12, 14, 12, 10}); !ok || got != 0 {
			t.Errorf("slope %v (%v), want 0", got, ok)
		}
	})
	t.Run("no line through fewer than two distinct times", func(t *testing.T) {
		for _, xs := range [][]float64{nil, {5}, {5, 5}} {
			if got, ok := slope(xs, make([]float64, len(xs))); ok {
				t.Errorf("slope over %v: %v, want none", xs, got)
			}
		}
	})
}

// The --groups --json field names are read by other tools too.
func TestBenchGroupsJSONFieldNames(t *testing.T) {
	b, err := json.Marshal(GroupsResult{Ungrouped: []GroupsRun{{}}})
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	want := []string{"concurrency", "grouped", "grouped_per_s", "groups", "jobs", "ratio", "rounds", "ungrouped", "ungrouped_per_s"}
	if names := slices.Sorted(maps.Keys(top)); !slices.Equal(names, want) {
		t.Errorf("bench --groups --json fields\n%v\nwant\n%v", names, want)
	}
	var runs []map[string]any
	if err := json.Unmarshal(top["ungrouped"], &runs); err != nil {
		t.Fatal(err)
	}
	wantRun := []string{"per_s", "redis_commands_per_job", "script_calls_per_job", "script_usec_per_call", "script_usec_per_job"}
	if names := slices.Sorted(maps.Keys(runs[0])); !slices.Equal(names, wantRun) {
		t.Errorf("ungrouped entries\n%v\nwant\n%v", names, wantRun)
	}
}

// INFO commandstats is read for calls and usec of each command, names as
// Redis 7 writes them, subcommands included.
func TestBenchParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_fcall:calls=40,usec=1200,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=112,usec_per_call=112.00,rejected_calls=0,failed_calls=0\r\n" +
		"used_memory:5\r\n"
	got := parseCommandStats(info)
	want := map[string]commandStat{"fcall": {40, 1200}, "config|resetstat": {1, 112}}
	if !maps.Equal(got, want) {
		t.Fatalf("parseCommandStats = %v, want %v", got, want)
	}
}

// The A/B's ratio is of the medians of the rounds.
func TestBenchGroupsMedian(t *testing.T) {
	runs := []GroupsRun{{PerS: 10}, {PerS: 30}, {PerS: 20}}
	if m := medianPerS(runs); m != 20 {
		t.Errorf("median of 10, 30, 20 = %v", m)
	}
	if m := medianPerS(runs[:2]); m != 20 {
		t.Errorf("median of 10, 30 = %v", m)
	}
}
