package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fenceq/fenceq/broker"
)

// TestDashboardRemoveInBrowser drives the bulk actions, the deletes and
// the purge in a real Chromium, at 1280 and 375 px: rows ticked one by one
// and with the page's select-all, a delete that asks first and answers
// each row, a promote, one job's delete from its page, a purge of a
// finished state, and a running job that cannot be deleted. The queue is
// one no pool serves, so its jobs stay where the test puts them.
func TestDashboardRemoveInBrowser(t *testing.T) {
	r := newUIRig(t, uiToken)
	ctx := browser(t)
	dir := artifacts(t)
	bctx := context.Background()
	const q = "cleanup"
	dead := func(id string) {
		t.Helper()
		if _, err := r.b.Client().Enqueue(bctx, broker.Job{Queue: q, Kind: "export", ID: id, MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
		res, err := r.b.Leases().Claim(bctx, q, 1, time.Minute)
		if err != nil || len(res.Leases) != 1 {
			t.Fatalf("claim %s: %v", id, err)
		}
		if _, err := r.b.Leases().Fail(bctx, res.Leases[0], broker.Failure{Error: "s3: access denied for bucket exports-eu", Dead: true}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		dead(fmt.Sprintf("export-%d", i))
	}
	for i := range 3 {
		if _, err := r.b.Client().Enqueue(bctx, broker.Job{Queue: q, Kind: "export", ID: fmt.Sprintf("nightly-%d", i), Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	state := func(id string) broker.State {
		j, err := r.b.Inspector().Job(bctx, q, id)
		if errors.Is(err, broker.ErrJobNotFound) {
			return "gone"
		}
		if err != nil {
			t.Fatal(err)
		}
		return j.State
	}
	click := func(what, css string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(css)))); err != nil {
			t.Fatalf("click %s: %v", what, err)
		}
	}
	flash := func() string {
		t.Helper()
		f, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".flash")))
		return f
	}
	open := func(path, sel string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(r.url(path)), chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
	}
	both := func(name, what string) {
		t.Helper()
		shoot(t, ctx, dir, name+"-1280", 1280)
		shoot(t, ctx, dir, name+"-375", 375)
		noOverflow(t, ctx, what)
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
			t.Fatal(err)
		}
	}
	ticked := func() []string {
		t.Helper()
		ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#bulk input[name="id"]:checked')].map(b => b.value)`))
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}

	// Signed out, the queue page has no boxes and no buttons.
	open("/ui/queues/"+q+"?state=dead", "table.jobs")
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#bulk, #select-all, #purge').length`)); n != 0 {
		t.Fatalf("signed out, the queue page shows %d bulk controls", n)
	}
	open("/ui/login?next=/ui/queues/"+q+"%3Fstate%3Ddead", `input[name="token"]`)
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), uiToken)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Submit(chromedp.CSS(`input[name="token"]`)))); err != nil {
		t.Fatalf("sign in: %v", err)
	}

	t.Run("select all of the page, then delete: asked first, each row answered", func(t *testing.T) {
		open("/ui/queues/"+q+"?state=dead", "#bulk")
		both("bulk-dead", "the dead tab with its bulk actions")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("select-all"))); err != nil {
			t.Fatal(err)
		}
		if got := ticked(); len(got) != 6 {
			t.Fatalf("select-all ticked %v, want the 6 rows", got)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#bulk input[value="export-5"]`))); err != nil {
			t.Fatal(err)
		}
		mixed, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("select-all").indeterminate`))
		if got := ticked(); len(got) != 5 || !mixed {
			t.Fatalf("after one row cleared: ticked %v, select-all mixed %v", got, mixed)
		}
		both("bulk-dead-ticked", "the dead tab with rows ticked")
		click("Delete selected", "#bulk-delete")
		n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#confirm-ids li').length`))
		if n != 5 || state("export-0") != broker.StateDead {
			t.Fatalf("the confirmation lists %d jobs, and export-0 is %s before it is confirmed", n, state("export-0"))
		}
		both("bulk-delete-confirm", "the bulk delete's confirmation")
		// Meanwhile another operator retries one: it is refused, and said so.
		if _, err := r.b.Inspector().Retry(bctx, q, "export-4"); err != nil {
			t.Fatal(err)
		}
		click("confirm", "#confirm")
		if f := flash(); !strings.Contains(f, "Deleted 4 of 5. Refused 1: export-4 is pending now, not dead.") {
			t.Fatalf("after the bulk delete the page says %q", f)
		}
		both("bulk-delete-done", "the dead tab after the bulk delete")
		for id, want := range map[string]broker.State{"export-0": "gone", "export-3": "gone", "export-4": broker.StatePending, "export-5": broker.StateDead} {
			if got := state(id); got != want {
				t.Errorf("%s is %s, want %s", id, got, want)
			}
		}
	})

	t.Run("promote two scheduled jobs", func(t *testing.T) {
		open("/ui/queues/"+q+"?state=scheduled", "#bulk")
		for _, id := range []string{"nightly-0", "nightly-2"} {
			if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#bulk input[value="`+id+`"]`))); err != nil {
				t.Fatal(err)
			}
		}
		both("bulk-scheduled-ticked", "the scheduled tab with rows ticked")
		click("Run selected now", "#bulk-promote")
		if f := flash(); !strings.Contains(f, "Promoted 2 of 2.") {
			t.Fatalf("after the promote the page says %q", f)
		}
		if state("nightly-0") != broker.StatePending || state("nightly-1") != broker.StateScheduled || state("nightly-2") != broker.StatePending {
			t.Fatalf("after the promote: %s %s %s", state("nightly-0"), state("nightly-1"), state("nightly-2"))
		}
		// And one from its own page.
		open(jobPath(q, "nightly-1"), "#promote")
		both("job-scheduled", "a scheduled job's page")
		click("Run it now", "#promote")
		if f := flash(); !strings.Contains(f, "Job nightly-1 is pending now") || state("nightly-1") != broker.StatePending {
			t.Fatalf("after Run it now the page says %q, the job is %s", f, state("nightly-1"))
		}
	})

	t.Run("one job deleted from its page", func(t *testing.T) {
		open(jobPath(q, "export-5"), "#delete")
		both("job-dead-delete-button", "a dead job's page")
		click("Delete…", "#delete")
		both("delete-confirm", "a delete's confirmation")
		if state("export-5") != broker.StateDead {
			t.Fatal("the confirmation page deleted the job")
		}
		click("confirm", "#confirm")
		if f := flash(); !strings.Contains(f, "Job export-5 (dead) deleted.") || state("export-5") != "gone" {
			t.Fatalf("after the delete the page says %q, the job is %s", f, state("export-5"))
		}
	})

	t.Run("a running job cannot be deleted", func(t *testing.T) {
		res, err := r.b.Leases().Claim(bctx, q, 1, time.Hour)
		if err != nil || len(res.Leases) != 1 {
			t.Fatalf("claim: %v", err)
		}
		id := res.Leases[0].ID
		open(jobPath(q, id), "h1")
		if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#delete').length`)); n != 0 {
			t.Fatal("a running job's page offers delete")
		}
		open(jobPath(q, id)+"/delete", "#refusal")
		both("delete-running-refused", "a running job's delete page")
		open("/ui/queues/"+q+"?state=running", "#bulk")
		if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#bulk-delete').length`)); n != 0 {
			t.Fatal("the running tab offers delete")
		}
	})

	t.Run("purge a finished state, asked first", func(t *testing.T) {
		for i := range 3 {
			dead(fmt.Sprintf("late-%d", i))
		}
		time.Sleep(broker.ResendHorizon + 200*time.Millisecond) // a purge leaves jobs finished within it
		open("/ui/queues/"+q+"?state=dead", "#purge")
		click("Purge all", "#purge")
		h1, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("h1")))
		if !strings.Contains(h1, "Purge the 3 dead job(s) of cleanup?") {
			t.Fatalf("the purge confirmation reads %q", h1)
		}
		both("purge-confirm", "the purge's confirmation")
		click("confirm", "#confirm")
		if f := flash(); !strings.Contains(f, "Purged 3 dead job(s) of cleanup.") {
			t.Fatalf("after the purge the page says %q", f)
		}
		c, err := r.b.Inspector().Counts(bctx, q)
		if err != nil || c.Dead != 0 {
			t.Fatalf("after the purge: %+v %v", c, err)
		}
		both("purge-done", "the dead tab after the purge")
		if bad, err := r.b.Inspector().Check(bctx, q); err != nil || len(bad) > 0 {
			t.Fatalf("Check after it all: %v %v", bad, err)
		}
	})
}
