package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fenceq/fenceq/broker"
)

// TestSchedulesPageInBrowser drives the schedules page in a real
// Chromium: stored and config schedules with their next and last runs, a
// schedule added through the form, paused, and removed after the
// confirmation; photographed at 1280 and 375 px.
func TestSchedulesPageInBrowser(t *testing.T) {
	r := newUIRig(t, uiToken)
	ctx := browser(t)
	dir := artifacts(t)
	bg := context.Background()
	sc := r.b.Schedules()
	for _, s := range []broker.Schedule{
		{Name: "digest-every-15m", Every: 15 * time.Minute, Job: broker.Job{Queue: r.queue, Kind: "digest", Payload: []byte(`{"to":"ops@example.com"}`)}},
		{Name: "nightly-billing-reconciliation-for-every-region", Cron: "0 3 * * *", CatchUp: true, Job: broker.Job{Queue: "billing", Kind: "reconcile"}},
		{Name: "weekly-cleanup", Cron: "0 4 * * 0", Job: broker.Job{Queue: r.queue, Kind: "cleanup"}},
	} {
		if err := sc.Add(bg, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := sc.Pause(bg, "weekly-cleanup"); err != nil {
		t.Fatal(err)
	}
	if err := sc.PublishConfig(bg, []broker.Schedule{{Name: "hourly-report", Cron: "@hourly", Job: broker.Job{Queue: r.queue, Kind: "report"}}}); err != nil {
		t.Fatal(err)
	}
	last := time.Now().Truncate(15 * time.Minute)
	if err := sc.RecordRun(bg, "digest-every-15m", last); err != nil {
		t.Fatal(err)
	}

	rowText := func(name string) string {
		t.Helper()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { for (const tr of document.querySelectorAll('table.schedules tbody tr')) {
			if (tr.cells[0].textContent.trim() === `+jsString(name)+`) return tr.innerText.replace(/\s+/g, ' ').trim() } return "" })()`))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	t.Run("the listing, signed out", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(r.url("/ui/schedules")), chromedp.WaitVisible(chromedp.CSS("table.schedules"))); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string][]string{
			"digest-every-15m": {"every 15m", last.UTC().Format("2006-01-02 15:04:05"), "active", "redis", "digest"},
			"weekly-cleanup":   {"paused", "never", "0 4 * * 0"},
			"hourly-report":    {"config", "@hourly", "active"},
		} {
			row := rowText(name)
			for _, w := range want {
				if !strings.Contains(row, w) {
					t.Errorf("the row of %s reads %q; want %q in it", name, row, w)
				}
			}
		}
		shoot(t, ctx, dir, "schedules-signed-out-1280", 1280)
		shoot(t, ctx, dir, "schedules-signed-out-375", 375)
		noOverflow(t, ctx, "the schedules page")
		// At 375 px the name and the next run stay on screen.
		right, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.querySelectorAll('table.schedules thead th')[1].getBoundingClientRect().right`))
		if err != nil {
			t.Fatal(err)
		}
		if right > 375 {
			t.Errorf("at 375 px the next-run column ends at %.0f px, off screen", right)
		}
	})

	t.Run("signed in: add, pause, remove after a confirmation", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800),
			chromedp.Navigate(r.url("/ui/login?next=/ui/schedules")),
			chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
			chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), uiToken)); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Submit(chromedp.CSS(`input[name="token"]`)))); err != nil {
			t.Fatalf("sign in: %v", err)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`form[action="/ui/act/schedule-add"]`)),
			chromedp.SendKeys(chromedp.CSS(`.sched-form input[name="name"]`), "invoices-every-30s"),
			chromedp.SendKeys(chromedp.CSS(`.sched-form input[name="spec"]`), "every 30s"),
			chromedp.SendKeys(chromedp.CSS(`.sched-form input[name="queue"]`), r.queue),
			chromedp.SendKeys(chromedp.CSS(`.sched-form input[name="kind"]`), "invoice"),
			chromedp.SendKeys(chromedp.CSS(`.sched-form textarea[name="payload"]`), `{"batch": 50}`)); err != nil {
			t.Fatal(err)
		}
		shoot(t, ctx, dir, "schedules-add-form-1280", 1280)
		shoot(t, ctx, dir, "schedules-signed-in-375", 375)
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Submit(chromedp.CSS(`.sched-form input[name="name"]`)))); err != nil {
			t.Fatalf("add: %v", err)
		}
		if row := rowText("invoices-every-30s"); !strings.Contains(row, "every 30s") || !strings.Contains(row, "active") {
			t.Fatalf("the added schedule's row reads %q", row)
		}
		flash, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('.flash') || {}).textContent`))
		if !strings.Contains(flash, "Schedule invoices-every-30s added") {
			t.Errorf("the flash reads %q", flash)
		}
		shoot(t, ctx, dir, "schedules-added-1280", 1280)

		// Pause it from its row.
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil,
			chromedp.Click(chromedp.CSS(`form[action="/ui/act/schedule-pause"]:has(input[value="invoices-every-30s"]) button`)))); err != nil {
			t.Fatalf("pause: %v", err)
		}
		if row := rowText("invoices-every-30s"); !strings.Contains(row, "paused") || !strings.Contains(row, "Resume") {
			t.Fatalf("the paused schedule's row reads %q", row)
		}
		if info, err := sc.Get(bg, "invoices-every-30s"); err != nil || !info.Paused {
			t.Fatalf("Redis holds %+v, %v", info, err)
		}

		// Remove it: the link asks first.
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil,
			chromedp.Click(chromedp.CSS(`a[href="/ui/schedules/remove?name=invoices-every-30s"]`)))); err != nil {
			t.Fatalf("remove: %v", err)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("confirm-remove"))); err != nil {
			t.Fatal(err)
		}
		if _, err := sc.Get(bg, "invoices-every-30s"); err != nil {
			t.Fatal("the confirmation page removed it")
		}
		shoot(t, ctx, dir, "schedule-remove-1280", 1280)
		shoot(t, ctx, dir, "schedule-remove-375", 375)
		noOverflow(t, ctx, "the confirmation")
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.ID("confirm-remove")))); err != nil {
			t.Fatalf("confirm: %v", err)
		}
		if row := rowText("invoices-every-30s"); row != "" {
			t.Fatalf("removed, still listed: %q", row)
		}
		if _, err := sc.Get(bg, "invoices-every-30s"); err == nil {
			t.Fatal("removed, still stored")
		}
		shoot(t, ctx, dir, "schedules-signed-in-1280", 1280)
	})
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
