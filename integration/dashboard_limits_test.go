package integration

import (
	"bufio"
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fenceq/fenceq/broker"
)

// TestWorkerdUILimitsForm: through `workerd ui` and an HTTP client that
// signs in and posts the queue page's limits form as a browser would,
// setting a rate keeps the max-running limit the form did not change.
func TestWorkerdUILimitsForm(t *testing.T) {
	c := client(t)
	prefix := fmt.Sprintf("fquilimits%d", time.Now().UnixNano())
	t.Cleanup(func() { dropPrefix(t, c, prefix) })
	b, err := broker.New(c, broker.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "mail", Kind: "send"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Inspector().SetMaxRunning(ctx, "mail", 5); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(workerdBin(t), "ui", "--redis", "redis://"+redisAddr, "--prefix", prefix,
		"--addr", "127.0.0.1:0", "--ui-token", uiToken)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("workerd ui printed no address: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	m := regexp.MustCompile(`(http://\S+)/ui/`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("workerd ui printed %q, no dashboard address", line)
	}
	base := m[1]

	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	get := func(path string) string {
		t.Helper()
		resp, err := hc.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s answered %d: %s", path, resp.StatusCode, body)
		}
		return string(body)
	}
	post := func(path string, v url.Values) {
		t.Helper()
		resp, err := hc.PostForm(base+path, v)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s answered %d (after redirects)", path, resp.StatusCode)
		}
	}
	post("/ui/login", url.Values{"token": {uiToken}, "next": {"/ui/"}})

	// The limits form as the queue page renders it, every input as sent.
	form := regexp.MustCompile(`(?s)<form method="post" action="/ui/act/limits".*?</form>`).FindString(get("/ui/queues/mail"))
	if !strings.Contains(form, `name="csrf"`) {
		t.Fatalf("the signed-in queue page has no limits form with a CSRF token: %q", form)
	}
	v := url.Values{}
	for _, in := range regexp.MustCompile(`<input [^>]*>`).FindAllString(form, -1) {
		var name, value string
		for _, a := range regexp.MustCompile(`(name|value)="([^"]*)"`).FindAllStringSubmatch(in, -1) {
			if a[1] == "name" {
				name = html.UnescapeString(a[2])
			} else {
				value = html.UnescapeString(a[2])
			}
		}
		v.Set(name, value)
	}
	if v.Get("max_running") != "5" {
		t.Errorf("the limits form does not start from max running 5: %v", v)
	}
	v.Set("rate", "100")
	v.Set("per", "1m")
	v.Set("next", "/ui/queues/mail")
	post("/ui/act/limits", v)
	l, err := b.Inspector().Limits(ctx, "mail")
	if err != nil {
		t.Fatal(err)
	}
	if l != (broker.Limits{MaxRunning: 5, Rate: 100, Per: time.Minute}) {
		t.Fatalf("after setting a rate through the form the limits are %q; want max running 5 kept", l)
	}
	if page := html.UnescapeString(get("/ui/queues/mail")); !strings.Contains(page, "at most 5 running, at most 100 starts per 1m0s") {
		t.Error("the queue page does not show the limits the form set")
	}
}

// TestDashboardGroupLimitsInBrowser drives the group limits forms in a
// real Chromium: the group defaults, then one group looked up by name, its
// own limits set and reset, each photographed at 1280 and 375 px.
func TestDashboardGroupLimitsInBrowser(t *testing.T) {
	r := newUIRig(t, uiToken)
	ctx := browser(t)
	dir := artifacts(t)
	q := r.queue
	bctx := context.Background()
	in := r.b.Inspector()
	r.enqueueInGroup(t, "acme-corporation-eu-west-1", "flaky", "receipt-1")
	r.waitState(t, "receipt-1", broker.StateDead)
	if err := in.SetMaxRunning(bctx, q, 20); err != nil {
		t.Fatal(err)
	}
	queuePage := r.url("/ui/queues/" + url.PathEscape(q))
	if err := chromedp.Do(ctx, chromedp.Navigate(r.url("/ui/login?next="+url.QueryEscape("/ui/queues/"+url.PathEscape(q)))),
		chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), uiToken)); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Submit(chromedp.CSS(`input[name="token"]`)))); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	open := func(u string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(u), chromedp.WaitVisible(chromedp.CSS("details.controls"))); err != nil {
			t.Fatalf("open %s: %v", u, err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("details.controls").open = true`)); err != nil {
			t.Fatal(err)
		}
	}
	submit := func(sel string) string {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(sel)))); err != nil {
			t.Fatalf("click %s: %v", sel, err)
		}
		flash, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".flash")))
		return flash
	}
	typeIn := func(sel, v string) {
		t.Helper()
		clear := fmt.Sprintf(`document.querySelector(%q).value = ""`, sel)
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](clear)); err != nil {
			t.Fatalf("clear %s: %v", sel, err)
		}
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(sel), v)); err != nil {
			t.Fatalf("type into %s: %v", sel, err)
		}
	}
	choose := func(sel, v string) {
		t.Helper()
		set := fmt.Sprintf(`document.querySelector(%q).value = %q`, sel, v)
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](set)); err != nil {
			t.Fatalf("choose %s in %s: %v", v, sel, err)
		}
	}

	open(queuePage)
	typeIn(`#group-defaults input[name="max_running"]`, "2")
	typeIn(`#group-defaults input[name="rate"]`, "10")
	typeIn(`#group-defaults input[name="per"]`, "1s")
	choose(`#group-defaults select[name="ordered"]`, "yes")
	flash := submit(`#group-defaults button`)
	if !strings.Contains(flash, "Group defaults of "+q+" set: each group ordered (one at a time), at most 10 starts per 1s") {
		t.Errorf("after the group defaults form the page says %q", flash)
	}
	info, err := in.GroupLimits(bctx, q, "")
	if err != nil {
		t.Fatal(err)
	}
	if info.Defaults != (broker.GroupLimits{MaxRunning: 2, Rate: 10, Per: time.Second, Ordered: true}) {
		t.Fatalf("the group defaults after the browser's form: %+v", info.Defaults)
	}
	if l, _ := in.Limits(bctx, q); l != (broker.Limits{MaxRunning: 20}) {
		t.Fatalf("the group defaults form changed the queue's own limits: %+v", l)
	}

	// One group, by name.
	open(queuePage)
	typeIn(`#group-lookup input[name="limits_group"]`, "acme-corporation-eu-west-1")
	if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(`#group-lookup button`)))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("details.controls").open = true`)); err != nil {
		t.Fatal(err)
	}
	of, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("group-limits-of")))
	if !strings.Contains(of, "no limits of its own") {
		t.Errorf("the looked-up group reads %q", of)
	}
	typeIn(`#group-override input[name="max_running"]`, "5")
	choose(`#group-override select[name="ordered"]`, "no")
	flash = submit(`#group-override button:not([name])`)
	if !strings.Contains(flash, "Group acme-corporation-eu-west-1 of "+q+" set: at most 5 running, at most 10 starts per 1s; its own: at most 5 running, not ordered") {
		t.Errorf("after the group's form the page says %q", flash)
	}
	if info, _ := in.GroupLimits(bctx, q, "acme-corporation-eu-west-1"); info.Effective != (broker.GroupLimits{MaxRunning: 5, Rate: 10, Per: time.Second}) {
		t.Fatalf("the group's limits after the browser's form: %+v", info.Effective)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("details.controls").open = true`)); err != nil {
		t.Fatal(err)
	}
	if v, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#group-override input[name="max_running"]').value`)); v != "5" {
		t.Errorf("after its change the group's form starts from max running %q, want 5", v)
	}
	shoot(t, ctx, dir, "group-limits-1280", 1280)
	shoot(t, ctx, dir, "group-limits-375", 375)
	noOverflow(t, ctx, "the group limits forms")
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
	flash = submit(`#group-reset`)
	if !strings.Contains(flash, "no limits of its own: the defaults") {
		t.Errorf("after the reset the page says %q", flash)
	}
	if info, _ := in.GroupLimits(bctx, q, "acme-corporation-eu-west-1"); info.Override != nil {
		t.Fatalf("the group keeps an override after its reset: %+v", info.Override)
	}
}
