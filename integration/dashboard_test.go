package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/internal/dashboard"
	"github.com/fenceq/fenceq/worker"
)

const uiToken = "integration-admin-token"

// chromiumPath finds the browser, or fails the test under CI and skips it
// elsewhere, saying how to install it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium on this machine for the dashboard's browser tests; install it: apt-get install -y chromium"
	if os.Getenv("CI") == "true" {
		t.Fatal("FAIL: " + msg)
	}
	t.Skip("SKIP: " + msg)
	return ""
}

// browser starts a headless Chromium for the test, closed with it.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancelTimeout)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// artifacts is where the screenshots go: $FENCEQ_ARTIFACTS, or a fresh
// directory that outlives the test so that a person can look at them.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FENCEQ_ARTIFACTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "fenceq-dashboard-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshots in %s", dir)
	return dir
}

// shoot saves a full-page PNG of the current page at the given width.
func shoot(t *testing.T, ctx context.Context, dir, name string, width int64) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 800)); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// noOverflow checks that the page's body is no wider than the viewport
// (tables scroll in their own boxes).
func noOverflow(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	w, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
	if err != nil {
		t.Fatal(err)
	}
	if w[0] > w[1] {
		t.Errorf("%s at %d px: the page is %d px wide, it overflows horizontally", what, w[1], w[0])
	}
}

// uiRig is a dashboard on the shared Redis under a prefix of its own, with
// a pool serving its queue.
type uiRig struct {
	b      *broker.Broker
	prefix string
	queue  string
	srv    *httptest.Server
	gate   chan struct{} // the "gated" jobs finish when it closes
	fixed  atomic.Bool   // "flaky" jobs fail for good until it is set
	logs   syncBuffer
}

func newUIRig(t *testing.T, token string) *uiRig {
	t.Helper()
	c := client(t)
	r := &uiRig{prefix: fmt.Sprintf("fqui%d", time.Now().UnixNano()), queue: "emails.✉", gate: make(chan struct{})}
	t.Cleanup(func() { dropPrefix(t, c, r.prefix) })
	var err error
	if r.b, err = broker.New(c, broker.Options{Prefix: r.prefix}); err != nil {
		t.Fatal(err)
	}
	if err := r.b.Inspector().SetEvents(context.Background(), r.queue, 1000); err != nil {
		t.Fatal(err)
	}
	mux := handlers.NewMux()
	mux.HandleFunc("gated", func(ctx context.Context, _ *handlers.Job) error {
		select {
		case <-r.gate:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	mux.HandleFunc("flaky", func(context.Context, *handlers.Job) error {
		if !r.fixed.Load() {
			return handlers.Permanent(errors.New(`upstream said <b>no</b> & "gave up"`))
		}
		return nil
	})
	pool, err := worker.New(r.b, mux, worker.Config{
		Queues: []worker.Queue{{Name: r.queue}}, Concurrency: 8, LeaseDuration: 3 * time.Second,
		PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&r.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = pool.Shutdown(ctx)
	})
	d, err := dashboard.New(dashboard.Config{Inspector: r.b.Inspector(), Token: token, Logger: slog.New(slog.NewTextHandler(&r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(d)
	t.Cleanup(r.srv.Close)
	return r
}

// dropPrefix deletes every key of a test's prefix.
func dropPrefix(t *testing.T, c redis.UniversalClient, prefix string) {
	ctx := context.Background()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+":*", 5000).Result()
		if err != nil {
			t.Logf("clean up %s: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			_ = c.Unlink(ctx, keys...).Err()
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

func (r *uiRig) url(path string) string { return r.srv.URL + path }

func (r *uiRig) enqueue(t *testing.T, kind, id string, meta ...string) {
	t.Helper()
	r.enqueueInGroup(t, "", kind, id, meta...)
}

// enqueueInGroup enqueues as enqueue does, the job in group ("" for none).
func (r *uiRig) enqueueInGroup(t *testing.T, group, kind, id string, meta ...string) {
	t.Helper()
	j := broker.Job{Queue: r.queue, Kind: kind, ID: id, Group: group, Payload: []byte(`{"to":"ada@example.com","template":"welcome"}`)}
	for i := 0; i+1 < len(meta); i += 2 {
		if j.Metadata == nil {
			j.Metadata = map[string]string{}
		}
		j.Metadata[meta[i]] = meta[i+1]
	}
	if _, err := r.b.Client().Enqueue(context.Background(), j); err != nil {
		t.Fatal(err)
	}
}

// waitState waits for a job's state on Redis (not in the page).
func (r *uiRig) waitState(t *testing.T, id string, want broker.State) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if j, err := r.b.Inspector().Job(context.Background(), r.queue, id); err == nil && j.State == want {
			return
		}
	}
	t.Fatalf("job %s never became %s; logs:\n%s", id, want, r.logs.String())
}

// liveText is a JS expression reading the element of a live key.
func liveText(key string) string {
	sel, _ := json.Marshal(`[data-live="` + strings.ReplaceAll(key, `"`, `\"`) + `"]`)
	return fmt.Sprintf(`(document.querySelector(%s) || {}).textContent`, sel)
}

func jobPath(queue, id string) string {
	return "/ui/queues/" + url.PathEscape(queue) + "/jobs/" + url.PathEscape(id)
}

// TestDashboardInBrowser drives the dashboard in a real Chromium: the
// overview's counts change while jobs complete, a dead job is retried by a
// signed-in user and seen done, and each page is photographed.
func TestDashboardInBrowser(t *testing.T) {
	r := newUIRig(t, uiToken)
	ctx := browser(t)
	dir := artifacts(t)
	q := r.queue

	for i := range 3 {
		r.enqueue(t, "gated", fmt.Sprintf("welcome-%d", i))
	}
	r.enqueueInGroup(t, "acme-corporation-eu-west-1", "flaky", "receipt-42",
		"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant", "acme")
	r.waitState(t, "receipt-42", broker.StateDead)
	for i := range 3 {
		r.waitState(t, fmt.Sprintf("welcome-%d", i), broker.StateRunning)
	}

	t.Run("the overview's counts change as jobs complete, without a reload", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.Navigate(r.url("/ui/")), chromedp.WaitVisible(chromedp.CSS(".queue"))); err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]string{"running|" + q: "3", "done|" + q: "0", "dead|" + q: "1"} {
			got, err := chromedp.Run(ctx, chromedp.Evaluate[string](liveText(key)))
			if err != nil || got != want {
				t.Fatalf("before the jobs finish, %s reads %q (%v), want %q", key, got, err, want)
			}
		}
		shoot(t, ctx, dir, "overview-1280", 1280)
		shoot(t, ctx, dir, "overview-375", 375)
		noOverflow(t, ctx, "the overview")
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
			t.Fatal(err)
		}
		// A mark on the window survives only if the page is not reloaded.
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.fenceqMark = true`)); err != nil {
			t.Fatal(err)
		}
		// The leases page while the jobs hold their leases.
		close(r.gate)
		cond := liveText("done|"+q) + ` === "3" && ` + liveText("running|"+q) + ` === "0" && window.fenceqMark === true`
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](liveText("done|"+q)))
			t.Fatalf("the overview never showed 3 done without a reload (done reads %q): %v", got, err)
		}
	})

	t.Run("a signed-in user retries a dead job and sees it done", func(t *testing.T) {
		job := r.url(jobPath(q, "receipt-42"))
		if err := chromedp.Do(ctx, chromedp.Navigate(job), chromedp.WaitVisible(chromedp.CSS("h1"))); err != nil {
			t.Fatal(err)
		}
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](liveText("job|state")))
		if state != "dead" {
			t.Fatalf("the job page says %q, want dead", state)
		}
		if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('form[action="/ui/act/retry"]').length`)); n != 0 {
			t.Fatal("a signed-out job page offers the retry form")
		}
		rows, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#metadata tbody tr')].map(r => r.innerText.replace(/\s+/g, ' ').trim())`))
		if want := []string{"tenant acme", "traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}; !slices.Equal(rows, want) {
			t.Errorf("the job page's metadata table reads %q, want %q", rows, want)
		}
		if group, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('#group') || {}).textContent`)); group != "acme-corporation-eu-west-1" {
			t.Errorf("the job page names the group %q, want acme-corporation-eu-west-1", group)
		}
		shoot(t, ctx, dir, "job-dead-1280", 1280)
		shoot(t, ctx, dir, "job-dead-375", 375)
		noOverflow(t, ctx, "the job page")
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800),
			chromedp.Click(chromedp.CSS(`a[href^="/ui/login"]`)),
			chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
			chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), uiToken),
		); err != nil {
			t.Fatalf("sign in from the job page: %v", err)
		}
		shoot(t, ctx, dir, "login-1280", 1280)
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Submit(chromedp.CSS(`input[name="token"]`)))); err != nil {
			t.Fatalf("sign in from the job page: %v", err)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("retry"))); err != nil {
			t.Fatalf("after signing in the job page has no retry button: %v", err)
		}
		r.fixed.Store(true)
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.ID("retry")))); err != nil {
			t.Fatal(err)
		}
		flash, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".flash")))
		if !strings.Contains(flash, "was dead and runs again") {
			t.Errorf("after the retry the page says %q", flash)
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](liveText("job|state")+` === "done"`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](liveText("job|state")))
			t.Fatalf("the job page never showed the retried job done (it says %q): %v", got, err)
		}
		if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("h1"))); err != nil {
			t.Fatal(err)
		}
		shoot(t, ctx, dir, "job-done-1280", 1280)
		if !strings.Contains(r.logs.String(), "action=retry") {
			t.Error("the retry was not logged")
		}
	})

	t.Run("expired leases are flagged, and a force release asks first", func(t *testing.T) {
		// A queue no pool serves: its expired leases stay unreaped.
		bctx := context.Background()
		for i := range 3 {
			if _, err := r.b.Client().Enqueue(bctx, broker.Job{Queue: "reports", Kind: "render", ID: fmt.Sprintf("report-%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		held, err := r.b.Leases().Claim(bctx, "reports", 3, time.Millisecond)
		if err != nil || len(held.Leases) != 3 {
			t.Fatalf("claim: %v", err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if exp, _ := r.b.Inspector().ExpiredLeases(bctx, "reports", 10); len(exp) == 3 {
				break
			} else if time.Now().After(deadline) {
				t.Fatal("the leases never expired")
			}
		}
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(r.url("/ui/queues/reports/leases")), chromedp.WaitVisible(chromedp.CSS("tr.expired"))); err != nil {
			t.Fatal(err)
		}
		explain, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".explain")))
		if !strings.Contains(explain, "no pool is reaping this queue") {
			t.Errorf("the expired leases are not explained: %q", explain)
		}
		shoot(t, ctx, dir, "leases-expired-1280", 1280)
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(r.url("/ui/queues/reports/jobs/report-0/release")), chromedp.WaitVisible(chromedp.ID("confirm-release"))); err != nil {
			t.Fatal(err)
		}
		if j, _ := r.b.Inspector().Job(bctx, "reports", "report-0"); j.State != broker.StateRunning {
			t.Fatalf("opening the confirmation page changed the job: %s", j.State)
		}
		shoot(t, ctx, dir, "release-confirm-1280", 1280)
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.ID("confirm-release")))); err != nil {
			t.Fatal(err)
		}
		flash, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".flash")))
		if j, _ := r.b.Inspector().Job(bctx, "reports", "report-0"); j.State != broker.StatePending || !strings.Contains(flash, "released") {
			t.Fatalf("after confirming, the job is %s and the page says %q", j.State, flash)
		}
		if err := chromedp.Do(ctx, chromedp.Navigate(r.url("/ui/")), chromedp.WaitVisible(chromedp.CSS(".queue"))); err != nil {
			t.Fatal(err)
		}
		shoot(t, ctx, dir, "overview-later-1280", 1280)
	})

	t.Run("the other pages render", func(t *testing.T) {
		r.enqueue(t, "flaky", "invoice-7") // done now that it is fixed
		for _, p := range []struct{ name, path, sel string }{
			{"queue-done", "/ui/queues/" + url.PathEscape(q) + "?state=done", "table.jobs"},
			{"leases", "/ui/queues/" + url.PathEscape(q) + "/leases", "h1"},
		} {
			if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(r.url(p.path)), chromedp.WaitVisible(chromedp.CSS(p.sel))); err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
			shoot(t, ctx, dir, p.name+"-1280", 1280)
			shoot(t, ctx, dir, p.name+"-375", 375)
			noOverflow(t, ctx, p.name)
		}
		// The queue actions opened, with the limits form as it starts.
		if err := r.b.Inspector().SetMaxRunning(context.Background(), q, 5); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(r.url("/ui/queues/"+url.PathEscape(q))),
			chromedp.WaitVisible(chromedp.CSS("details.controls"))); err != nil {
			t.Fatalf("queue actions: %v", err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("details.controls").open = true`)); err != nil {
			t.Fatalf("open the queue actions: %v", err)
		}
		if v, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('input[name="max_running"]').value`)); v != "5" {
			t.Errorf("the limits form starts from max running %q, want 5", v)
		}
		shoot(t, ctx, dir, "queue-actions-1280", 1280)
		shoot(t, ctx, dir, "queue-actions-375", 375)
		noOverflow(t, ctx, "the queue actions")
	})
}

// TestDashboardRefusesWithoutToken: a user who is not signed in sees no
// action, and a forged POST from the page is answered 403.
func TestDashboardRefusesWithoutToken(t *testing.T) {
	for _, tc := range []struct{ name, token string }{{"read-only", ""}, {"signed out", uiToken}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newUIRig(t, tc.token)
			ctx := browser(t)
			r.enqueue(t, "flaky", "receipt-1")
			r.waitState(t, "receipt-1", broker.StateDead)
			if err := chromedp.Do(ctx, chromedp.Navigate(r.url(jobPath(r.queue, "receipt-1"))), chromedp.WaitVisible(chromedp.CSS("h1"))); err != nil {
				t.Fatal(err)
			}
			n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('form[action^="/ui/act/"]').length`))
			if err != nil || n != 0 {
				t.Fatalf("the job page offers %d action forms (%v), want none", n, err)
			}
			forge := fmt.Sprintf(`fetch("/ui/act/retry", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
				body: new URLSearchParams({queue: %q, id: "receipt-1", csrf: "forged"})}).then(r => r.status)`, r.queue)
			status, err := chromedp.Run(ctx, chromedp.Evaluate[int](forge, chromedp.EvalAwaitPromise))
			if err != nil || status != http.StatusForbidden {
				t.Fatalf("a forged POST from the page answered %d (%v), want 403", status, err)
			}
			if j, _ := r.b.Inspector().Job(context.Background(), r.queue, "receipt-1"); j.State != broker.StateDead {
				t.Fatalf("after the forged POST the job is %s, want dead", j.State)
			}
		})
	}
}

// TestDashboardLargeQueue: the pages of a queue of 100,000 jobs answer,
// and a kind filter that matches nothing says how far it looked.
func TestDashboardLargeQueue(t *testing.T) {
	c := client(t)
	prefix := fmt.Sprintf("fquibig%d", time.Now().UnixNano())
	t.Cleanup(func() { dropPrefix(t, c, prefix) })
	b, err := broker.New(c, broker.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	// Four pipelines in flight at a time: Redis runs them one after the
	// other anyway, and fifty at once wait long enough, on a loaded CI
	// machine, for a client's read timeout.
	const n, batch, inFlight = 100_000, 1000, 4
	var wg sync.WaitGroup
	errs := make(chan error, n/batch)
	sem := make(chan struct{}, inFlight)
	for start := 0; start < n; start += batch {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			jobs := make([]broker.Job, batch)
			for i := range jobs {
				jobs[i] = broker.Job{Queue: "big", Kind: "resize", ID: fmt.Sprintf("img-%06d", start+i), Payload: []byte(`{}`)}
			}
			for _, e := range b.Client().EnqueueMany(context.Background(), jobs) {
				if e.Err != nil {
					errs <- e.Err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	d, err := dashboard.New(dashboard.Config{Inspector: b.Inspector()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/ui/queues/big"), chromedp.WaitVisible(chromedp.CSS("table.jobs"))); err != nil {
		t.Fatal(err)
	}
	rows, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("table.jobs tbody tr").length`))
	total, _ := chromedp.Run(ctx, chromedp.Evaluate[string](liveText("pending|big")))
	if rows != broker.PageLimitDefault || total != "100,000" {
		t.Fatalf("the queue page shows %d rows and %q pending; want %d and 100,000", rows, total, broker.PageLimitDefault)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/ui/queues/big?kind=nothing"), chromedp.WaitVisible(chromedp.CSS(".note.warn"))); err != nil {
		t.Fatal(err)
	}
	note, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".note.warn")))
	if !strings.Contains(note, "5,000 of 100,000") {
		t.Fatalf("a kind filter matching nothing says %q; want how far it looked (5,000 of 100,000)", note)
	}
}
