package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/fenceq/fenceq/worker"
)

// cli runs workerd commands in-process against one miniredis.
type cli struct {
	t   *testing.T
	url string
	mr  *miniredis.Miniredis
}

func newCLI(t *testing.T) *cli {
	mr := miniredis.RunT(t)
	return &cli{t: t, url: "redis://" + mr.Addr(), mr: mr}
}

// run runs one command with --redis added, answering exit code and output.
func (c *cli) run(stdin string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
	code := run(context.Background(), e, append(args, "--redis", c.url))
	return code, out.String(), errOut.String()
}

func (c *cli) ok(stdin string, args ...string) string {
	c.t.Helper()
	code, out, errOut := c.run(stdin, args...)
	if code != 0 {
		c.t.Fatalf("workerd %v: exit %d\n%s%s", args, code, out, errOut)
	}
	return out
}

// ok2 is ok answering standard error too.
func (c *cli) ok2(stdin string, args ...string) (string, string) {
	c.t.Helper()
	code, out, errOut := c.run(stdin, args...)
	if code != 0 {
		c.t.Fatalf("workerd %v: exit %d\n%s%s", args, code, out, errOut)
	}
	return out, errOut
}

func (c *cli) job(queue, id string) jobJSON {
	c.t.Helper()
	var j jobJSON
	if err := json.Unmarshal([]byte(c.ok("", "inspect", "job", queue, id, "--json")), &j); err != nil {
		c.t.Fatal(err)
	}
	return j
}

func TestEnqueueAndInspect(t *testing.T) {
	c := newCLI(t)
	id := strings.TrimSpace(c.ok("", "enqueue", "mail", "welcome", "--payload", `{"to":"ada"}`, "--id", "w-1", "--max-attempts", "3", "--priority", "5"))
	if id != "w-1" {
		t.Fatalf("printed id %q", id)
	}
	j := c.job("mail", "w-1")
	if j.State != "pending" || j.Kind != "welcome" || compact(j.Payload) != `{"to":"ada"}` || j.MaxAttempts != 3 || j.Priority != 5 {
		t.Fatalf("job %+v", j)
	}
	if code, _, errOut := c.run("", "enqueue", "mail", "welcome", "--id", "w-1"); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Fatalf("duplicate id: exit %d: %s", code, errOut)
	}

	file := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(file, []byte(`{"from":"file"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile := strings.TrimSpace(c.ok("", "enqueue", "mail", "welcome", "--payload", "@"+file))
	fromStdin := strings.TrimSpace(c.ok(`{"from":"stdin"}`, "enqueue", "mail", "welcome", "--payload", "-", "--delay", "1h"))
	if p := c.job("mail", fromFile).Payload; compact(p) != `{"from":"file"}` {
		t.Fatalf("payload from file %s", p)
	}
	if j := c.job("mail", fromStdin); compact(j.Payload) != `{"from":"stdin"}` || j.State != "scheduled" {
		t.Fatalf("payload from stdin %+v", j)
	}
	for _, bad := range [][]string{
		{"enqueue", "mail", "welcome", "--payload", "{nope"},
		{"enqueue", "mail"},
		{"enqueue", "mail", "welcome", "--delay", "1m", "--at", "2030-01-01T00:00:00Z"},
		{"enqueue", "mail", "welcome", "--at", "tomorrow"},
		{"enqueue", "ma{il", "welcome"},
		{"enqueue", "mail", "welcome", "--priority", "1000"},
	} {
		if code, _, errOut := c.run("", bad...); code != 2 || errOut == "" {
			t.Errorf("workerd %v: exit %d (%q), want 2 with a message", bad, code, errOut)
		}
	}

	var all struct {
		Queues []queueJSON `json:"queues"`
	}
	if err := json.Unmarshal([]byte(c.ok("", "inspect", "--json")), &all); err != nil {
		t.Fatal(err)
	}
	if len(all.Queues) != 1 || all.Queues[0].Queue != "mail" || all.Queues[0].Pending != 2 || all.Queues[0].Scheduled != 1 {
		t.Fatalf("inspect --json: %+v", all)
	}
	if out := c.ok("", "inspect"); !strings.Contains(out, "mail") || !strings.Contains(out, "PENDING") {
		t.Fatalf("inspect table:\n%s", out)
	}
	if code, _, _ := c.run("", "inspect", "job", "mail", "nope"); code != 1 {
		t.Fatalf("inspect of a missing job: exit %d, want 1", code)
	}
}

func TestEnqueueJSONL(t *testing.T) {
	c := newCLI(t)
	lines := strings.Join([]string{
		`{"kind":"a","payload":{"n":1}}`,
		`{"kind":"b","id":"fixed","delay":"1h"}`,
		`not json`,
		`{"kind":"a","id":"fixed"}`,
		``,
		`{"kind":"c","max_attempts":2,"priority":3}`,
	}, "\n")
	code, out, errOut := c.run(lines, "enqueue", "bulk", "--jsonl", "-")
	if code != 1 {
		t.Fatalf("exit %d, want 1 for the bad lines\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "enqueued 3 jobs, 2 failed") || !strings.Contains(errOut, "line 3:") || !strings.Contains(errOut, "line 4:") {
		t.Fatalf("stdout %q stderr %q", out, errOut)
	}
	if j := c.job("bulk", "fixed"); j.Kind != "b" || j.State != "scheduled" {
		t.Fatalf("job fixed: %+v", j)
	}
}

func TestAdminCommands(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "q", "k", "--id", "p")
	if out := c.ok("", "cancel", "q", "p"); !strings.Contains(out, "cancelled p") {
		t.Fatalf("cancel: %s", out)
	}
	if out := c.ok("", "retry", "q", "p"); !strings.Contains(out, "was cancelled") {
		t.Fatalf("retry: %s", out)
	}
	if j := c.job("q", "p"); j.State != "pending" || j.Generation != 1 {
		t.Fatalf("after retry: %+v", j)
	}
	if out := c.ok("", "release", "q", "p"); !strings.Contains(out, "was not running") {
		t.Fatalf("release: %s", out)
	}
	if code, _, _ := c.run("", "release", "q", "missing"); code != 1 {
		t.Fatalf("release of a missing job: exit %d", code)
	}
	if code, _, _ := c.run("", "retry", "q"); code != 2 {
		t.Fatalf("retry without id or --dead: exit %d", code)
	}
	if out := c.ok("", "retry", "q", "--dead"); !strings.Contains(out, "retrying 0 dead") {
		t.Fatalf("retry --dead: %s", out)
	}
	if out := c.ok("", "check"); !strings.Contains(out, "ok: 1 queue") {
		t.Fatalf("check: %s", out)
	}
	// A job hash deleted behind fenceq's back: check reports it, exit 1.
	c.mr.Del("fenceq:{q}:job:p")
	code, out, _ := c.run("", "check", "q")
	if code != 1 || !strings.Contains(out, "does not exist") {
		t.Fatalf("check of a broken queue: exit %d\n%s", code, out)
	}
	// A group's problem names the group, and no job.
	c.mr.HSet("fenceq:{q}:grunning", "ghost", "1")
	code, out, _ = c.run("", "check", "q")
	if code != 1 || !strings.Contains(out, "q: group \"ghost\": grunning counts 1 running, but no job of the group is running (a phantom slot)\n") {
		t.Fatalf("check of a phantom slot: exit %d\n%s", code, out)
	}
}

// run serves liveness, readiness and metrics while its pools work, and
// stops on cancellation.
func TestRunServesEndpoints(t *testing.T) {
	c := newCLI(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "workerd.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
http: %s
pools:
  - queues: [q]
    poll_interval: 20ms
handlers:
  k:
    exec: {command: ["true"]}
`, addr)), 0o644)
	c.ok("", "enqueue", "q", "k", "--id", "j1")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var errOut bytes.Buffer
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &errOut, getenv: func(string) string { return "" }}
		done <- run(ctx, e, []string{"run", "--config", cfg, "--redis", c.url, "--log-format", "json"})
	}()
	get := func(path string) (int, string) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			resp, err := http.Get("http://" + addr + path)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp.StatusCode, string(b)
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v\n%s", path, err, errOut.String())
			}
		}
	}
	if code, body := get("/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	for deadline := time.Now().Add(10 * time.Second); c.job("q", "j1").State != "done"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("job not done:\n%s", errOut.String())
		}
	}
	_, metrics := get("/metrics")
	for _, name := range []string{"fenceq_jobs_succeeded_total", `fenceq_queue_jobs{queue="q",state="done"} 1`,
		"fenceq_job_duration_seconds_bucket", "fenceq_stale_settlements_total", "fenceq_leases_reaped_total"} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run exited %d\n%s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop")
	}
}

func compact(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func TestPauseResumeCommands(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "q", "k")
	if out := c.ok("", "pause", "q"); !strings.Contains(out, "paused q") {
		t.Fatalf("pause: %s", out)
	}
	var all struct {
		Queues []queueJSON `json:"queues"`
	}
	if err := json.Unmarshal([]byte(c.ok("", "inspect", "--json")), &all); err != nil || len(all.Queues) != 1 || !all.Queues[0].Paused {
		t.Fatalf("inspect --json of a paused queue: %+v %v", all, err)
	}
	if out := c.ok("", "inspect", "q"); !strings.Contains(out, "PAUSED") {
		t.Fatalf("inspect q: %s", out)
	}
	c.ok("", "resume", "q")
	if out := c.ok("", "inspect", "q"); strings.Contains(out, "PAUSED") {
		t.Fatalf("still paused: %s", out)
	}
	if code, _, _ := c.run("", "pause"); code != 2 {
		t.Fatalf("pause without a queue: exit %d", code)
	}
}

func TestConfigRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.yaml")
	os.WriteFile(path, []byte("pools:\n  - queues: [a]\n    retention: {done: 1h, dead: 72h, max_done: 1000}\n  - queues: [b]\nhandlers:\n  k: {exec: {command: [\"true\"]}}\n"), 0o644)
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Pools[0].workerConfig().Retention
	if r == nil || r.Done != time.Hour || r.Dead != 72*time.Hour || r.Cancelled != 0 || r.MaxDone != 1000 {
		t.Fatalf("retention %+v", r)
	}
	if cfg.Pools[1].workerConfig().Retention != nil {
		t.Fatal("a pool without retention should take the worker's defaults (nil)")
	}
}

// A pool's unknown_kind reaches worker.Config.UnknownKind; "forever" is
// worker.WaitForever, and an omitted field takes the worker's default.
func TestConfigUnknownKind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.yaml")
	os.WriteFile(path, []byte("pools:\n  - queues: [a]\n    unknown_kind: {delay: 2s, dead_after: forever}\n  - queues: [b]\nhandlers:\n  k: {exec: {command: [\"true\"]}}\n"), 0o644)
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if u := cfg.Pools[0].workerConfig().UnknownKind; u != (worker.UnknownKindPolicy{Delay: 2 * time.Second, For: worker.WaitForever}) {
		t.Fatalf("unknown_kind %+v", u)
	}
	if u := cfg.Pools[1].workerConfig().UnknownKind; u != (worker.UnknownKindPolicy{}) {
		t.Fatalf("a pool without unknown_kind should take the worker's defaults (zero), got %+v", u)
	}
	os.WriteFile(path, []byte("pools:\n  - queues: [a]\n    unknown_kind: {wait: 1h}\nhandlers:\n  k: {exec: {command: [\"true\"]}}\n"), 0o644)
	if _, err := loadConfig(path); err == nil || !strings.Contains(err.Error(), "dead_after") {
		t.Fatalf("an unknown field of unknown_kind: %v, want the fields listed", err)
	}
}

// "forever" and -1 keep finished jobs without a limit of that kind; any
// other negative count is refused with what to write instead.
func TestConfigRetentionForever(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.yaml")
	os.WriteFile(path, []byte("pools:\n  - queues: [a]\n    retention: {done: forever, max_done: -1}\nhandlers:\n  k: {exec: {command: [\"true\"]}}\n"), 0o644)
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Pools[0].workerConfig().Retention
	if r == nil || r.Done != -1 || r.MaxDone != -1 || r.Dead != 0 {
		t.Fatalf("retention %+v", r)
	}
	os.WriteFile(path, []byte("pools:\n  - queues: [a]\n    retention: {max_dead: -5}\nhandlers:\n  k: {exec: {command: [\"true\"]}}\n"), 0o644)
	if _, err := loadConfig(path); err == nil || !strings.Contains(err.Error(), "-1 for no limit") {
		t.Fatalf("loadConfig of max_dead: -5 = %v, want an error saying -1 means no limit", err)
	}
}

func TestConfigPeriodic(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte(`
pools:
  - queues: [reports]
periodic:
  - name: nightly
    cron: "0 3 * * *"
    queue: reports
    kind: build
    payload: {full: true, days: [1, 2]}
    catch_up: true
handlers:
  build: {exec: {command: ["true"]}}
`), 0o644)
	cfg, err := loadConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cfg.periodic(0, cfg.Periodic[0])
	if err != nil || p.Cron != "0 3 * * *" || !p.CatchUp || string(p.Job.Payload) != `{"days":[1,2],"full":true}` {
		t.Fatalf("periodic %+v (%s) %v", p, p.Job.Payload, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("pools:\n  - queues: [a]\nperiodic:\n  - name: x\n    every: 1m\nhandlers:\n  k: {exec: {command: [\"true\"]}}\n"), 0o644)
	if _, err := loadConfig(bad); err == nil || !strings.Contains(err.Error(), "periodic[0]: name, queue and kind are required") {
		t.Fatalf("loadConfig of a periodic job without queue: %v", err)
	}
}

// enqueue --wait returns the finished job, woken by its settlement.
func TestEnqueueWait(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "w.yaml")
	os.WriteFile(cfg, []byte("http: \"off\"\npools:\n  - queues: [q]\n    poll_interval: 20ms\nhandlers:\n  echo: {exec: {command: [cat]}}\n  fail: {exec: {command: [\"false\"], permanent_exit_codes: [1]}}\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
		done <- run(ctx, e, []string{"run", "--config", cfg, "--redis", c.url})
	}()
	defer func() { cancel(); <-done }()
	var j jobJSON
	if err := json.Unmarshal([]byte(c.ok("", "enqueue", "q", "echo", "--payload", `{"x":1}`, "--wait")), &j); err != nil {
		t.Fatal(err)
	}
	if j.State != "done" || compact(j.Result) != `{"x":1}` {
		t.Fatalf("waited job %+v", j)
	}
	if code, out, _ := c.run("", "enqueue", "q", "fail", "--wait"); code != 1 || !strings.Contains(out, `"state": "dead"`) {
		t.Fatalf("a job that dies: exit %d\n%s", code, out)
	}
	if err := json.Unmarshal([]byte(c.ok("", "enqueue", "q", "echo", "--payload", `{"x":2}`, "--wait=1m")), &j); err != nil || j.State != "done" {
		t.Fatalf("--wait=1m: %+v (%v)", j, err)
	}
	// No pool serves queue idle: --wait=D gives up after D, prints the job
	// as it is, and exits 1; the job stays.
	start := time.Now()
	code, out, errOut := c.run("", "enqueue", "idle", "echo", "--id", "w-1", "--wait=300ms")
	if err := json.Unmarshal([]byte(out), &j); err != nil || code != 1 || j.State != "pending" || j.ID != "w-1" ||
		!strings.Contains(errOut, "workerd enqueue: job w-1 is still pending after --wait=300ms; it goes on") {
		t.Fatalf("--wait=300ms: exit %d, job %+v (%v), stderr %q", code, j, err, errOut)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 10*time.Second {
		t.Errorf("--wait=300ms took %v", took)
	}
	if j := c.job("idle", "w-1"); j.State != "pending" {
		t.Errorf("the job after the wait gave up: %+v", j)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--wait=soon"}, `--wait "soon": want --wait alone (until the job ends) or a positive duration with its unit, such as --wait=30s`},
		{[]string{"--wait=-1s"}, `--wait "-1s": want --wait alone`},
		{[]string{"--wait", "30s"}, "unexpected arguments: 30s; to wait at most 30s, write --wait=30s (with '=')"},
	} {
		code, out, errOut := c.run("", append([]string{"enqueue", "q", "echo"}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

func TestLimitCommand(t *testing.T) {
	c := newCLI(t)
	if out := c.ok("", "limit", "q", "--max-running", "3", "--rate", "10", "--per", "1s", "--create"); !strings.Contains(out, "at most 3 running, at most 10 starts per 1s") {
		t.Fatalf("limit: %s", out)
	}
	if out := c.ok("", "limit", "q"); !strings.Contains(out, "at most 3 running") {
		t.Fatalf("limit (show): %s", out)
	}
	if out := c.ok("", "limit", "q", "--clear"); !strings.Contains(out, "no limits") {
		t.Fatalf("limit --clear: %s", out)
	}
	if code, _, errOut := c.run("", "limit", "q", "--rate", "5", "--create"); code != 2 || !strings.Contains(errOut, "go together") {
		t.Fatalf("a rate without --per: exit %d: %s", code, errOut)
	}
}

func TestEventsAndFollow(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "q", "k")
	if code, _, errOut := c.run("", "inspect", "q", "--follow"); code != 1 || !strings.Contains(errOut, "workerd events q --keep") {
		t.Fatalf("follow without events: exit %d: %s", code, errOut)
	}
	if out := c.ok("", "events", "q", "--keep", "500"); !strings.Contains(out, "keeping about 500") {
		t.Fatalf("events: %s", out)
	}
	id := strings.TrimSpace(c.ok("", "enqueue", "q", "k"))
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: io.Discard, getenv: func(string) string { return "" }}
	if code := run(ctx, e, []string{"inspect", "q", "--follow", "--redis", c.url}); code != 0 {
		t.Fatalf("follow: exit %d", code)
	}
	if !strings.Contains(out.String(), "enqueued") || !strings.Contains(out.String(), id) {
		t.Fatalf("follow printed:\n%s", out.String())
	}
	if out := c.ok("", "events", "q", "--off"); !strings.Contains(out, "events off") {
		t.Fatalf("events --off: %s", out)
	}
}

func TestEnqueueAfter(t *testing.T) {
	c := newCLI(t)
	parent := strings.TrimSpace(c.ok("", "enqueue", "q", "k"))
	child := strings.TrimSpace(c.ok("", "enqueue", "q", "k", "--after", parent))
	if j := c.job("q", child); j.State != "blocked" {
		t.Fatalf("child %+v", j)
	}
	var one struct {
		Blocked int64 `json:"blocked"`
	}
	if err := json.Unmarshal([]byte(c.ok("", "inspect", "q", "--json")), &one); err != nil || one.Blocked != 1 {
		t.Fatalf("inspect q --json: %+v %v", one, err)
	}
	if code, _, errOut := c.run("", "enqueue", "q", "k", "--after", "nope"); code != 2 || !strings.Contains(errOut, "no such job") {
		t.Fatalf("--after a missing job: exit %d: %s", code, errOut)
	}
}

// A --jsonl line carries unique keys and dependencies like the flags do; a
// held unique key is reported with the holder, and is not a failed line.
func TestEnqueueJSONLUniqueAndDependencies(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "q", "k", "--id", "gone")
	c.ok("", "cancel", "q", "gone")
	lines := strings.Join([]string{
		`{"kind":"k","id":"parent"}`,
		`{"kind":"k","id":"child","depends_on":["parent"]}`,
		`{"kind":"k","id":"stubborn","depends_on":["gone"],"run_if_dependency_fails":true}`,
		`{"kind":"k","id":"follower","depends_on":["gone"]}`,
		`{"kind":"k","id":"first","unique_key":"report","unique_for":"1h"}`,
		`{"kind":"k","id":"again","unique_key":"report"}`,
	}, "\n")
	code, out, errOut := c.run(lines, "enqueue", "q", "--jsonl", "-")
	if code != 0 || !strings.Contains(out, "enqueued 5 jobs, 0 failed") {
		t.Fatalf("exit %d, want 0 with a held key not counted as failed\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, `line 6: unique key "report" is held by job first`) {
		t.Fatalf("the held key is not reported with its line and holder: %q", errOut)
	}
	for id, want := range map[string]string{"child": "blocked", "stubborn": "pending", "follower": "cancelled"} {
		if j := c.job("q", id); j.State != want {
			t.Errorf("job %s: %s, want %s", id, j.State, want)
		}
	}
	// unique_for holds the key past the job's end. (The newcomer asks for
	// a TTL too: the enqueue script reads the newcomer's, not the holder's.)
	c.ok("", "cancel", "q", "first")
	if _, errOut := c.ok2("", "enqueue", "q", "k", "--unique", "report", "--unique-for", "1h"); !strings.Contains(errOut, "held by job first") {
		t.Fatalf("after its holder was cancelled, the key is free: unique_for was lost (%q)", errOut)
	}

	code, out, errOut = c.run(`{"kind":"k","unique_key":"x","unique_for":"soon"}`, "enqueue", "q", "--jsonl", "-")
	if code != 1 || !strings.Contains(out, "1 failed") || !strings.Contains(errOut, "unique_for") {
		t.Fatalf("a bad unique_for: exit %d\n%s%s", code, out, errOut)
	}
}

// workerd limit changes only the limits it is given: a rate keeps the
// running limit and the other way round, and the queue's events stay on.
// Zero and negative values are usage errors, never a silent success.
func TestLimitCommandChangesOnlyWhatIsGiven(t *testing.T) {
	c := newCLI(t)
	c.ok("", "events", "q", "--keep", "100", "--create")
	c.ok("", "limit", "q", "--rate", "10", "--per", "1s")
	if out := c.ok("", "limit", "q", "--max-running", "3"); !strings.Contains(out, "at most 3 running, at most 10 starts per 1s") {
		t.Fatalf("--max-running after a rate: %s", out)
	}
	if out := c.ok("", "limit", "q", "--rate", "20"); !strings.Contains(out, "at most 3 running, at most 20 starts per 1s") {
		t.Fatalf("--rate alone after both: %s", out)
	}
	if out := c.ok("", "events", "q"); !strings.Contains(out, "keeping about 100") {
		t.Fatalf("events after workerd limit: %s", out)
	}
	for _, bad := range [][]string{
		{"--max-running", "0"}, {"--max-running", "-1"}, {"--rate", "0"}, {"--rate", "-1"}, {"--per", "0s"}, {"--per", "-1s"},
		{"--clear", "--rate", "5"},
	} {
		code, _, errOut := c.run("", append([]string{"limit", "q"}, bad...)...)
		msg, _, _ := strings.Cut(errOut, "\n")
		if code != 2 || !strings.Contains(msg, bad[len(bad)-2]) || !strings.Contains(msg, "--clear") {
			t.Errorf("workerd limit q %v: exit %d, %q; want 2 and one line naming the flag and --clear", bad, code, errOut)
		}
	}
	if out := c.ok("", "limit", "q"); !strings.Contains(out, "at most 3 running, at most 20 starts per 1s") {
		t.Fatalf("limits after refused values: %s", out)
	}
	if out := c.ok("", "limit", "q", "--clear"); !strings.Contains(out, "no limits") {
		t.Fatalf("limit --clear: %s", out)
	}
	if out := c.ok("", "events", "q"); !strings.Contains(out, "keeping about 100") {
		t.Fatalf("events after workerd limit --clear: %s", out)
	}
}
