package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// registryListing is what `workerd workers --json` prints, as a script
// reads it.
type registryListing struct {
	Now     time.Time `json:"now"`
	Workers []struct {
		ID      string `json:"id"`
		Name    string `json:"name"`
		Host    string `json:"host"`
		PID     int    `json:"pid"`
		Version string `json:"version"`
		Running int    `json:"running"`
		Jobs    []struct {
			Queue string `json:"queue"`
			ID    string `json:"id"`
		} `json:"jobs"`
	} `json:"workers"`
}

func listWorkers(t *testing.T, common []string) registryListing {
	t.Helper()
	code, out, errOut := workerd(t, "", append([]string{"workers", "--json"}, common...)...)
	if code != 0 {
		t.Fatalf("workers --json: exit %d: %s", code, errOut)
	}
	var l registryListing
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("workers --json: %v\n%s", err, out)
	}
	return l
}

func (l registryListing) pids() map[int]int {
	m := map[int]int{}
	for _, w := range l.Workers {
		m[w.PID] = w.Running
	}
	return m
}

// Two `workerd run` processes are listed by `workerd workers` with their
// pids and running jobs, and `workerd inspect QUEUE` names the one holding
// a job. One is killed with SIGKILL: it leaves the list once its entry's
// TTL has passed, with no help from anyone. The other, stopped with
// SIGTERM, leaves it at once.
func TestWorkerdRegistryKill9(t *testing.T) {
	client(t)
	dir := t.TempDir()
	prefix := fmt.Sprintf("fqreg-%d", time.Now().UnixNano())
	t.Cleanup(func() { deletePrefixKeys(t, prefix) })
	common := []string{"--redis", "redis://" + redisAddr, "--prefix", prefix}
	script := filepath.Join(dir, "work.sh")
	writeFile(t, script, "#!/bin/sh\necho $PPID > "+filepath.Join(dir, "$FENCEQ_JOB_ID")+".pid\nexec sleep 60\n", 0o755)
	config := filepath.Join(dir, "workerd.yaml")
	const interval = 300 * time.Millisecond // TTL 900ms
	writeFile(t, config, `
http: "off"
shutdown_timeout: 1s
pools:
  - queues: [reg]
    concurrency: 1
    lease: 2s
    poll_interval: 50ms
    registry_interval: 300ms
handlers:
  work:
    exec:
      command: [`+script+`]
`, 0o644)
	runner := func() *exec.Cmd {
		cmd := exec.Command(workerdBin(t), append([]string{"run", "--config", config, "--log-format", "json"}, common...)...)
		cmd.Stderr = &bytes.Buffer{}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	a := runner()
	// One job, taken by a: it is the only runner yet. Its supervisor is
	// the runner's child; the script writes its parent's pid.
	if code, _, errOut := workerd(t, "", append([]string{"enqueue", "reg", "work", "--id", "held"}, common...)...); code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, errOut)
	}
	waitForFile(t, filepath.Join(dir, "held.pid"), 20*time.Second)
	b := runner()
	pa, pb := a.Process.Pid, b.Process.Pid
	var l registryListing
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		l = listWorkers(t, common)
		if p := l.pids(); len(p) == 2 && p[pa] == 1 && p[pb] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("want runner a (pid %d) running 1 job and runner b (pid %d) idle; listed %+v", pa, pb, l)
		}
	}
	for _, w := range l.Workers {
		if w.Name != "pool 0" || w.Host == "" || w.Version == "" {
			t.Errorf("listed %+v", w)
		}
		if w.PID == pa && (len(w.Jobs) != 1 || w.Jobs[0].ID != "held" || w.Jobs[0].Queue != "reg") {
			t.Errorf("runner a lists %+v, want the job held", w.Jobs)
		}
	}
	code, out, errOut := workerd(t, "", append([]string{"inspect", "reg"}, common...)...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("pid %d (pool 0)", pa)) {
		t.Errorf("inspect reg: exit %d, does not name runner a (pid %d) as the holder:\n%s%s", code, pa, out, errOut)
	}

	if err := a.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.Wait()
	killed := time.Now()
	for ; ; time.Sleep(20 * time.Millisecond) {
		p := listWorkers(t, common).pids()
		if _, ok := p[pa]; !ok {
			if _, ok := p[pb]; !ok {
				t.Fatalf("runner b (pid %d) left the list too", pb)
			}
			break
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("runner a (pid %d) still listed 10s after kill -9; its TTL is %v", pa, 3*interval)
		}
	}
	gone := time.Since(killed)
	t.Logf("runner a left the list %v after kill -9 (TTL %v)", gone.Round(time.Millisecond), 3*interval)
	if gone > 3*interval+2*time.Second {
		t.Errorf("runner a left the list %v after kill -9; its TTL is %v", gone, 3*interval)
	}

	if err := b.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(); err != nil {
		t.Fatalf("runner b after SIGTERM: %v\n%s", err, b.Stderr)
	}
	if l := listWorkers(t, common); len(l.Workers) != 0 {
		t.Errorf("after runner b stopped, listed %+v", l.Workers)
	}
	// Neither runner leaves its registry keys behind, and the index holds
	// no dead pool once listed.
	c := client(t)
	keys, _ := c.Keys(context.Background(), prefix+":workers:*").Result()
	if len(keys) != 0 {
		t.Errorf("registry keys left: %q", keys)
	}
}

// The workers page, a running job's page and the leases page in a real
// Chromium, at 1280 and 375 px: the pools, the holder of each lease and
// the link from a job to its pool.
func TestDashboardWorkersInBrowser(t *testing.T) {
	r := newUIRig(t, "")
	ctx := browser(t)
	dir := artifacts(t)
	// A second pool on the same queue, with a name of its own.
	gate := make(chan struct{})
	mux := handlers.NewMux()
	mux.HandleFunc("gated", func(ctx context.Context, _ *handlers.Job) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	p2, err := worker.New(r.b, mux, worker.Config{Name: "reports-eu-west-1", Queues: []worker.Queue{{Name: r.queue}, {Name: "reports"}},
		Concurrency: 2, LeaseDuration: 3 * time.Second, PollInterval: 50 * time.Millisecond, RegistryInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(gate)
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = p2.Shutdown(sctx)
	})
	t.Cleanup(func() { close(r.gate) })
	// As many jobs as both pools have slots (the rig's 8, this one's 2), so
	// that each holds some, whichever claims first.
	const jobsRun = 10
	for i := range jobsRun {
		r.enqueue(t, "gated", fmt.Sprintf("invoice-2026-12-%04d", i))
	}
	for i := range jobsRun {
		r.waitState(t, fmt.Sprintf("invoice-2026-12-%04d", i), broker.StateRunning)
	}
	// The rig's pool refreshes every 10 s: its jobs are listed after its
	// next refresh; wait until both pools list theirs.
	var held string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ws, err := r.b.Inspector().Workers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, w := range ws.Workers {
			n += len(w.Jobs)
			if w.Name == "reports-eu-west-1" && len(w.Jobs) > 0 {
				held = w.Jobs[0].ID
			}
		}
		if len(ws.Workers) == 2 && n == jobsRun && held != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry lists %d pools and %d jobs, want 2 and %d: %+v", len(ws.Workers), n, jobsRun, ws)
		}
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(r.url("/ui/workers")), chromedp.WaitVisible(chromedp.ID("workers"))); err != nil {
		t.Fatal(err)
	}
	rows, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#workers tbody tr').length`))
	jobs, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#worker-jobs tbody tr').length`))
	if rows != 2 || jobs != jobsRun {
		t.Errorf("the workers page shows %d pools and %d jobs, want 2 and %d", rows, jobs, jobsRun)
	}
	shoot(t, ctx, dir, "workers-1280", 1280)
	shoot(t, ctx, dir, "workers-375", 375)
	noOverflow(t, ctx, "the workers page")

	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(r.url(jobPath(r.queue, held))), chromedp.WaitVisible(chromedp.ID("holder"))); err != nil {
		t.Fatal(err)
	}
	who, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#holder').textContent`))
	if !strings.Contains(who, "(reports-eu-west-1)") {
		t.Errorf("the job page says it is held by %q, want the pool reports-eu-west-1", who)
	}
	shoot(t, ctx, dir, "job-running-1280", 1280)
	shoot(t, ctx, dir, "job-running-375", 375)
	noOverflow(t, ctx, "a running job's page")
	// The link leads to the pool's row.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Click(chromedp.CSS("#holder a")), chromedp.WaitVisible(chromedp.ID("workers"))); err != nil {
		t.Fatal(err)
	}
	if hash, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash && document.querySelector(location.hash) ? document.querySelector(location.hash).innerText : ""`)); !strings.Contains(hash, "reports-eu-west-1") {
		t.Errorf("the holder's link leads to %q, not the pool's row", hash)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(r.url("/ui/queues/"+strings.ReplaceAll(r.queue, " ", "%20")+"/leases")), chromedp.WaitVisible(chromedp.CSS("table.jobs"))); err != nil {
		t.Fatal(err)
	}
	linked, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('table.jobs td.holder a[href^="/ui/workers#w-"]').length`))
	if linked != jobsRun {
		t.Errorf("the leases page names the holder of %d leases, want %d", linked, jobsRun)
	}
	shoot(t, ctx, dir, "leases-1280", 1280)
	shoot(t, ctx, dir, "leases-375", 375)
	noOverflow(t, ctx, "the leases page")
}
