package integration

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// TestDashboardGroupsInBrowser drives a queue's groups page in a real
// Chromium: the groups with the largest backlogs first, each linked to its
// pending jobs, the find form, and a queue with more groups than one
// listing reads saying so; photographed at 1280 and 375 px.
func TestDashboardGroupsInBrowser(t *testing.T) {
	r := newUIRig(t, uiToken)
	ctx := browser(t)
	dir := artifacts(t)
	bg := context.Background()
	rdb := client(t)
	// A queue no pool serves, so that its jobs stay where they are.
	const q = "tenants✓"
	base := r.prefix + ":{" + q + "}:"
	long := "a-customer-with-a-very-long-identifier-0123456789abcdef-eu-west"
	backlog := map[string]int{long: 60}
	for i := 1; i <= 24; i++ {
		backlog[fmt.Sprintf("tenant-%02d", i)] = 2 * (25 - i)
	}
	for g, n := range backlog {
		var jobs []broker.Job
		for j := range n {
			jobs = append(jobs, broker.Job{Queue: q, Kind: "sync", ID: fmt.Sprintf("%s/%d", g, j), Group: g})
		}
		for _, e := range r.b.Client().EnqueueMany(bg, jobs) {
			if e.Err != nil {
				t.Fatal(e.Err)
			}
		}
	}
	for i := range 3 {
		if _, err := r.b.Client().Enqueue(bg, broker.Job{Queue: q, Kind: "sync", ID: fmt.Sprint("plain-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Limits by hand, as the settings and overrides hold them: a default
	// max, a rate of its own, an ordered group.
	rdb.HSet(bg, base+"limits", "g_max_running", "2", "g_overrides", "1")
	rdb.HSet(bg, base+"glimits", "tenant-02", "- 5 1000 -", "tenant-03", "- - - 1")
	// Claims: tenant-01 fills its 2 slots and waits in the timer.
	if res, err := r.b.Leases().Claim(bg, q, 30, time.Hour); err != nil || len(res.Leases) == 0 {
		t.Fatalf("claim: %v", err)
	}

	groupsPath := "/ui/queues/" + url.PathEscape(q) + "/groups"
	t.Run("the listing", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(r.url(groupsPath)), chromedp.WaitVisible(chromedp.CSS("table.groups"))); err != nil {
			t.Fatal(err)
		}
		names, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.groups tbody tr td:first-child a")].map(a => a.textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != 25 || !strings.HasPrefix(long, strings.TrimSuffix(names[0], "…")) || names[1] != "tenant-01" {
			t.Errorf("groups listed %d, first %v; want 25, the largest backlogs first", len(names), names[:min(3, len(names))])
		}
		shoot(t, ctx, dir, "groups-1280", 1280)
		shoot(t, ctx, dir, "groups-375", 375)
		noOverflow(t, ctx, "the groups page")
	})

	t.Run("find a group and open its pending jobs", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(r.url(groupsPath)), chromedp.WaitVisible(chromedp.CSS(`input[name="group"]`)),
			chromedp.SendKeys(chromedp.CSS(`input[name="group"]`), "tenant-03")); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Submit(chromedp.CSS(`input[name="group"]`)))); err != nil {
			t.Fatalf("find: %v", err)
		}
		cards, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("section.group-card")].map(c => c.innerText)`))
		if len(cards) != 1 || !strings.HasPrefix(cards[0], "tenant-03") || !strings.Contains(cards[0], "yes: one at a time") {
			t.Errorf("found %q; want tenant-03 alone, ordered", cards)
		}
		shoot(t, ctx, dir, "groups-find-1280", 1280)
		shoot(t, ctx, dir, "groups-find-375", 375)
		noOverflow(t, ctx, "a group found by name")
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(`section.group-card dd a`)))); err != nil {
			t.Fatalf("open the group's pending jobs: %v", err)
		}
		ids, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.jobs td.id a")].map(a => a.textContent)`))
		for _, id := range ids {
			if !strings.HasPrefix(id, "tenant-03/") {
				t.Errorf("the group's pending jobs list %s", id)
			}
		}
		if len(ids) == 0 {
			t.Error("the group's pending jobs list none")
		}
		shoot(t, ctx, dir, "queue-group-pending-1280", 1280)
		shoot(t, ctx, dir, "queue-group-pending-375", 375)
		noOverflow(t, ctx, "a group's pending jobs")
	})

	t.Run("more groups than a listing reads", func(t *testing.T) {
		const many = "many-groups"
		if _, err := r.b.Client().Enqueue(bg, broker.Job{Queue: many, Kind: "sync", ID: "one", Group: "g-000000"}); err != nil {
			t.Fatal(err)
		}
		mbase := r.prefix + ":{" + many + "}:"
		for i := 0; i < broker.GroupsScanCap+10; i += 10000 {
			var zs []redis.Z
			for j := i; j < min(broker.GroupsScanCap+10, i+10000); j++ {
				zs = append(zs, redis.Z{Score: float64(j + 10), Member: fmt.Sprintf("g-%06d", j+1)})
			}
			if err := rdb.ZAdd(bg, mbase+"grotation", zs...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(r.url("/ui/queues/"+url.PathEscape(many)+"/groups")),
			chromedp.WaitVisible(chromedp.CSS("p.note.warn"))); err != nil {
			t.Fatal(err)
		}
		note, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("p.note.warn").textContent`))
		if !strings.Contains(note, "stopped after 100,000 entries") || !strings.Contains(note, "Find a group by name") {
			t.Errorf("the truncation note says %q", note)
		}
		shoot(t, ctx, dir, "groups-truncated-1280", 1280)
		shoot(t, ctx, dir, "groups-truncated-375", 375)
		noOverflow(t, ctx, "the truncated groups page")
	})
}
