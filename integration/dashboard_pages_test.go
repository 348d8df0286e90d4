package integration

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/dashboard"
)

// busyQueue is the queue seedBusyQueue fills, and the jobs of each state
// it leaves for the pages to show.
type busyQueue struct {
	name                                  string
	running, dead, pending, blocked, done string // one job of each
}

// seedBusyQueue fills a queue as an operator meets one: six-digit counts
// (100,000 pending, 100,000 scheduled, 100,000 done), a few running jobs
// (one with the error of its earlier attempt), dead jobs with long errors,
// cancelled, blocked and grouped ones. No pool serves it: what the pages
// show stays put.
func seedBusyQueue(t *testing.T, b *broker.Broker) busyQueue {
	t.Helper()
	bg := context.Background()
	q := busyQueue{name: "billing", running: "run-0", dead: "dead-0", pending: "img-199999", blocked: "blocked-0", done: "img-000000"}
	enqueue := func(n int, job func(i int) broker.Job) {
		const batch, inFlight = 1000, 4
		var wg sync.WaitGroup
		errs := make(chan error, n/batch+1)
		sem := make(chan struct{}, inFlight)
		for start := 0; start < n; start += batch {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				jobs := make([]broker.Job, 0, batch)
				for i := start; i < min(n, start+batch); i++ {
					jobs = append(jobs, job(i))
				}
				for _, e := range b.Client().EnqueueMany(bg, jobs) {
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
	}
	// The first 100,000 are claimed and acked: done. The rest stay pending.
	enqueue(200_000, func(i int) broker.Job {
		return broker.Job{Queue: q.name, Kind: "resize", ID: fmt.Sprintf("img-%06d", i), Payload: []byte(`{"w":640}`)}
	})
	for done := 0; done < 100_000; {
		res, err := b.Leases().Claim(bg, q.name, 1000, time.Minute)
		if err != nil || len(res.Leases) == 0 {
			t.Fatalf("claim: %d leases, %v", len(res.Leases), err)
		}
		acks := make([]broker.Ack, len(res.Leases))
		for i, l := range res.Leases {
			acks[i] = broker.Ack{Lease: l, Result: []byte(`{"ok":true}`)}
		}
		if _, err := b.Leases().AckMany(bg, acks); err != nil {
			t.Fatal(err)
		}
		done += len(acks)
	}
	enqueue(100_000, func(i int) broker.Job {
		return broker.Job{Queue: q.name, Kind: "invoice.monthly", ID: fmt.Sprintf("later-%06d", i), Delay: time.Hour}
	})
	// The special jobs go first in line: a priority above the backlog's.
	special := func(j broker.Job) {
		j.Queue, j.Priority = q.name, 50
		if _, err := b.Client().Enqueue(bg, j); err != nil {
			t.Fatal(err)
		}
	}
	longErr := `charge card: POST https://payments.example.com/v1/charges: 502 Bad Gateway: upstream connect error or disconnect/reset before headers. reset reason: connection termination; retried 3 times over 41s, the last response body was {"error":{"code":"gateway_timeout","message":"The upstream payment processor did not answer in time."}}`
	for i := range 4 {
		special(broker.Job{Kind: "charge.card", ID: fmt.Sprintf("dead-%d", i), MaxAttempts: 1})
	}
	res, err := b.Leases().Claim(bg, q.name, 4, time.Minute)
	if err != nil || len(res.Leases) != 4 {
		t.Fatalf("claim the jobs to kill: %d, %v", len(res.Leases), err)
	}
	for _, l := range res.Leases {
		if _, err := b.Leases().Fail(bg, l, broker.Failure{Error: longErr, Dead: true}); err != nil {
			t.Fatal(err)
		}
	}
	// run-0 failed once already (its last error stays), then runs again.
	for i := range 3 {
		special(broker.Job{Kind: "charge.card", ID: fmt.Sprintf("run-%d", i)})
	}
	res, err = b.Leases().Claim(bg, q.name, 1, time.Minute)
	if err != nil || len(res.Leases) != 1 || res.Leases[0].ID != "run-0" {
		t.Fatalf("claim run-0: %+v, %v", res.Leases, err)
	}
	if _, err := b.Leases().Fail(bg, res.Leases[0], broker.Failure{Error: "card declined: insufficient funds (code 51)"}); err != nil {
		t.Fatal(err)
	}
	if res, err = b.Leases().Claim(bg, q.name, 3, 10*time.Minute); err != nil || len(res.Leases) != 3 {
		t.Fatalf("claim the running jobs: %d, %v", len(res.Leases), err)
	}
	for i := range 3 {
		special(broker.Job{Kind: "email.receipt", ID: fmt.Sprintf("blocked-%d", i), DependsOn: []string{"run-1"}})
		special(broker.Job{Kind: "email.receipt", ID: fmt.Sprintf("cancelled-%d", i), Delay: time.Hour})
		if _, err := b.Inspector().Cancel(bg, q.name, fmt.Sprintf("cancelled-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		special(broker.Job{Kind: "sync.tenant", ID: fmt.Sprintf("tenant-sync-%d", i), Group: fmt.Sprintf("tenant-%02d", i)})
	}
	return q
}

// pageChecks runs in the page and answers what is wrong with it as a
// person would see it: a figure of the overview broken over two lines or
// wider than its tile, a table whose key column (th.keycol) is not on
// screen as the page opens, or whose first row's key cell spills out of
// its column, a time that is not UTC and 24-hour, an empty box.
const pageChecks = `(() => {
  const bad = [];
  const vw = window.innerWidth;
  for (const dd of document.querySelectorAll(".counts dd")) {
    const r = document.createRange();
    r.selectNodeContents(dd);
    const lines = new Set([...r.getClientRects()].map(x => Math.round(x.top)));
    if (lines.size > 1) bad.push("tile figure " + JSON.stringify(dd.textContent) + " is broken over " + lines.size + " lines");
    if (dd.scrollWidth > dd.clientWidth + 1) bad.push("tile figure " + JSON.stringify(dd.textContent) + " is wider than its tile");
  }
  for (const table of document.querySelectorAll("table")) {
    if (!table.tBodies[0] || !table.tBodies[0].rows.length) continue;
    const key = table.querySelector("thead th.keycol");
    if (!key) { bad.push("a table has no key column: " + JSON.stringify(table.tHead ? table.tHead.innerText : "")); continue; }
    const cell = table.tBodies[0].rows[0].cells[key.cellIndex];
    for (const el of [key, cell]) {
      const r = el.getBoundingClientRect();
      if (r.left < 0 || r.right > vw + 1) bad.push("key column " + JSON.stringify(key.innerText) + " is off screen: " + Math.round(r.left) + "-" + Math.round(r.right) + " of " + vw + " px");
      if (el.scrollWidth > el.clientWidth + 1) bad.push("key column " + JSON.stringify(key.innerText) + ": " + JSON.stringify(el.innerText.slice(0, 40)) + " spills out of its column");
    }
  }
  const text = document.body.innerText;
  if (/\b(AM|PM)\b/.test(text)) bad.push("a 12-hour time: " + text.match(/.{0,30}\b(AM|PM)\b/)[0]);
  for (const m of text.matchAll(/\d\d:\d\d:\d\d(?! UTC)/g)) bad.push("a time without UTC: " + text.substr(Math.max(0, m.index - 20), 40));
  for (const el of document.querySelectorAll("pre, dd")) {
    if (el.textContent.trim() === "") bad.push("an empty box: " + el.outerHTML.slice(0, 80));
  }
  return bad;
})()`

// TestDashboardEveryPage opens every page of the dashboard in a real
// Chromium at 1280 and 375 px, on a queue with six-digit counts, and
// checks each as a person would look at it (pageChecks), and the page's
// width. The screenshots go to $FENCEQ_ARTIFACTS.
func TestDashboardEveryPage(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a queue of 300,000 jobs")
	}
	c := client(t)
	prefix := fmt.Sprintf("fquipages%d", time.Now().UnixNano())
	t.Cleanup(func() { dropPrefix(t, c, prefix) })
	b, err := broker.New(c, broker.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Inspector().SetEvents(context.Background(), "billing", 1000); err != nil {
		t.Fatal(err)
	}
	q := seedBusyQueue(t, b)
	var logs syncBuffer
	d, err := dashboard.New(dashboard.Config{Inspector: b.Inspector(), Token: uiToken, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	ctx := browser(t)
	dir := artifacts(t)

	// Signed in, so the pages show their forms and checkboxes too.
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/ui/login"), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), uiToken)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Submit(chromedp.CSS(`input[name="token"]`)))); err != nil {
		t.Fatal(err)
	}

	base := "/ui/queues/" + url.PathEscape(q.name)
	pages := []struct{ name, path, sel string }{
		{"overview", "/ui/", ".queue"},
		{"leases", base + "/leases", "table"},
		{"groups", base + "/groups", "table"},
		{"job-running", base + "/jobs/" + q.running, "h1"},
		{"job-dead", base + "/jobs/" + q.dead, "h1"},
		{"job-done", base + "/jobs/" + q.done, "h1"},
		{"job-blocked", base + "/jobs/" + q.blocked, "h1"},
		{"release", base + "/jobs/" + q.running + "/release", "h1"},
		{"not-found", base + "/jobs/no-such-job", "h1"},
	}
	for _, st := range broker.States {
		pages = append(pages, struct{ name, path, sel string }{"queue-" + string(st), base + "?state=" + string(st), "table.jobs"})
	}
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			for _, width := range []int64{1280, 375} {
				if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 800), chromedp.Navigate(srv.URL+p.path), chromedp.WaitVisible(chromedp.CSS(p.sel))); err != nil {
					t.Fatalf("%s at %d px: %v", p.path, width, err)
				}
				// One live refresh first, where the page has one: what it
				// writes is what a person sees after 2 s.
				if live, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.querySelector("main[data-live-url]")`)); live {
					if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("live-status").textContent.startsWith("Figures refreshed")`,
						chromedp.WithPollingTimeout(15*time.Second))); err != nil {
						t.Fatalf("%s at %d px: no live refresh: %v", p.path, width, err)
					}
				}
				bad, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](pageChecks))
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range bad {
					t.Errorf("%s at %d px: %s", p.name, width, b)
				}
				noOverflow(t, ctx, p.name)
				shoot(t, ctx, dir, fmt.Sprintf("%s-%d", p.name, width), width)
			}
		})
	}

	t.Run("the live refresh leaves no empty last-error box", func(t *testing.T) {
		for _, id := range []string{q.running, "run-1"} {
			if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(srv.URL+base+"/jobs/"+id), chromedp.WaitVisible(chromedp.CSS("h1"))); err != nil {
				t.Fatal(err)
			}
			before, _ := chromedp.Run(ctx, chromedp.Evaluate[string](liveText("job|error")))
			if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("live-status").textContent.startsWith("Figures refreshed")`,
				chromedp.WithPollingTimeout(15*time.Second))); err != nil {
				t.Fatal(err)
			}
			after, _ := chromedp.Run(ctx, chromedp.Evaluate[string](liveText("job|error")))
			if strings.TrimSpace(after) == "" || after != before {
				t.Errorf("job %s: the last-error box read %q before the live refresh and %q after", id, before, after)
			}
		}
	})
}
