package dashboard_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// The schedules page lists stored and config schedules; a signed-in user
// adds, pauses, resumes and removes a stored one (removal behind a
// confirmation), and never changes a config one.
func TestSchedulesPage(t *testing.T) {
	r := setup(t, token)
	c := r.client()
	ctx := context.Background()
	sc := r.b.Schedules()
	if err := sc.PublishConfig(ctx, []broker.Schedule{{Name: "from-yaml", Cron: "@daily", Job: broker.Job{Queue: "mail", Kind: "report"}}}); err != nil {
		t.Fatal(err)
	}

	// Read by anyone; no action without a sign-in.
	code, body := r.get(c, "/ui/schedules")
	if code != http.StatusOK || !strings.Contains(body, "from-yaml") || !strings.Contains(body, "config") || !strings.Contains(body, "Sign in</a> to add") {
		t.Fatalf("GET /ui/schedules answered %d:\n%s", code, body)
	}
	if strings.Contains(body, "schedule-pause") {
		t.Fatal("a signed-out page offers a pause")
	}

	csrf := r.signIn(c)
	add := url.Values{"csrf": {csrf}, "next": {"/ui/schedules"}, "name": {"digest"}, "spec": {"every 1h"},
		"queue": {"mail"}, "kind": {"digest"}, "payload": {`{"to":"ops"}`}}
	resp, _ := r.post(c, "/ui/act/schedule-add", add)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/schedules" {
		t.Fatalf("add answered %d to %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	got, err := sc.Get(ctx, "digest")
	if err != nil || got.Every != time.Hour || string(got.Job.Payload) != `{"to":"ops"}` || got.Source != broker.SourceRedis {
		t.Fatalf("after the add: %+v, %v", got, err)
	}
	_, body = r.get(c, "/ui/schedules")
	if !strings.Contains(body, "Schedule digest added") || !strings.Contains(body, "every 1h") {
		t.Fatalf("the page after the add:\n%s", body)
	}
	if strings.Count(body, "schedule-pause") != 1 {
		t.Fatalf("want one pause button (the stored schedule's, none for the config one):\n%s", body)
	}

	// A refused add says why and keeps what was typed.
	bad := url.Values{"csrf": {csrf}, "next": {"/ui/schedules"}, "name": {"broken"}, "spec": {"61 * * * *"}, "queue": {"mail"}, "kind": {"k"}}
	resp, _ = r.post(c, "/ui/act/schedule-add", bad)
	loc := resp.Header.Get("Location")
	if !strings.HasPrefix(loc, "/ui/schedules?") {
		t.Fatalf("a refused add goes back to %q", loc)
	}
	_, body = r.get(c, loc)
	if !strings.Contains(html.UnescapeString(body), "Schedule not added: invalid cron") || !strings.Contains(body, `value="broken"`) {
		t.Fatalf("the page after a refused add:\n%s", body)
	}
	for _, f := range []url.Values{
		{"name": {"x"}, "spec": {"every soon"}, "queue": {"q"}, "kind": {"k"}},
		{"name": {"x"}, "spec": {""}, "queue": {"q"}, "kind": {"k"}},
		{"name": {"x"}, "spec": {"every 1m"}, "queue": {"q"}, "kind": {"k"}, "payload": {"not json"}},
		{"name": {"from-yaml"}, "spec": {"every 1m"}, "queue": {"q"}, "kind": {"k"}},
	} {
		f.Set("csrf", csrf)
		r.post(c, "/ui/act/schedule-add", f)
		if _, err := sc.Get(ctx, "x"); err == nil {
			t.Fatalf("the add %v was stored", f)
		}
	}
	if got, _ := sc.Get(ctx, "from-yaml"); got.Source != broker.SourceConfig {
		t.Fatal("a config schedule's name was stored from the dashboard")
	}

	// Pause and resume.
	r.post(c, "/ui/act/schedule-pause", url.Values{"csrf": {csrf}, "name": {"digest"}, "next": {"/ui/schedules"}})
	if got, _ := sc.Get(ctx, "digest"); !got.Paused {
		t.Fatal("not paused")
	}
	_, body = r.get(c, "/ui/schedules")
	if !strings.Contains(body, "schedule-resume") || !strings.Contains(body, ">paused<") {
		t.Fatalf("a paused schedule's row:\n%s", body)
	}
	r.post(c, "/ui/act/schedule-resume", url.Values{"csrf": {csrf}, "name": {"digest"}, "next": {"/ui/schedules"}})
	if got, _ := sc.Get(ctx, "digest"); got.Paused {
		t.Fatal("not resumed")
	}

	// Removal: a confirmation page first, then the POST.
	code, body = r.get(c, "/ui/schedules/remove?name=digest")
	if code != http.StatusOK || !strings.Contains(body, `id="confirm-remove"`) {
		t.Fatalf("the confirmation answered %d:\n%s", code, body)
	}
	if _, err := sc.Get(ctx, "digest"); err != nil {
		t.Fatal("the confirmation page removed it")
	}
	code, body = r.get(c, "/ui/schedules/remove?name=from-yaml")
	if code != http.StatusOK || strings.Contains(body, `id="confirm-remove"`) || !strings.Contains(body, "only there") {
		t.Fatalf("the confirmation of a config schedule answered %d:\n%s", code, body)
	}
	if code, _ := r.get(c, "/ui/schedules/remove?name=nope"); code != http.StatusNotFound {
		t.Fatalf("the confirmation of no schedule answered %d", code)
	}
	r.post(c, "/ui/act/schedule-remove", url.Values{"csrf": {csrf}, "name": {"digest"}, "next": {"/ui/schedules"}})
	if _, err := sc.Get(ctx, "digest"); err == nil {
		t.Fatal("not removed")
	}

	// Without the CSRF token nothing changes.
	if err := sc.Add(ctx, broker.Schedule{Name: "kept", Every: time.Minute, Job: broker.Job{Queue: "q", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	resp, _ = r.post(c, "/ui/act/schedule-remove", url.Values{"name": {"kept"}})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a remove without the CSRF token answered %d", resp.StatusCode)
	}
	if _, err := sc.Get(ctx, "kept"); err != nil {
		t.Fatal("a remove without the CSRF token removed it")
	}
}

// A schedule's name is text on the page, never markup, and any name can
// be removed through its confirmation page.
func TestSchedulesHostileNames(t *testing.T) {
	r := setup(t, token)
	c := r.client()
	ctx := context.Background()
	sc := r.b.Schedules()
	for _, name := range []string{`<script>alert(1)</script>`, "..", "a/b?c=d&e", "ünïcode ✉"} {
		if err := sc.Add(ctx, broker.Schedule{Name: name, Every: time.Minute, Job: broker.Job{Queue: "q", Kind: "k"}}); err != nil {
			t.Fatal(err)
		}
	}
	csrf := r.signIn(c)
	_, body := r.get(c, "/ui/schedules")
	if strings.Contains(body, "<script>alert") {
		t.Fatal("a schedule's name reached the page as markup")
	}
	for _, name := range []string{`<script>alert(1)</script>`, "..", "a/b?c=d&e", "ünïcode ✉"} {
		link := "/ui/schedules/remove?" + url.Values{"name": {name}}.Encode()
		if !strings.Contains(html.UnescapeString(body), link) {
			t.Fatalf("no remove link %s on the page", link)
		}
		code, page := r.get(c, link)
		if code != http.StatusOK || !strings.Contains(page, `id="confirm-remove"`) {
			t.Fatalf("the confirmation of %q answered %d", name, code)
		}
		r.post(c, "/ui/act/schedule-remove", url.Values{"csrf": {csrf}, "name": {name}, "next": {"/ui/schedules"}})
		if _, err := sc.Get(ctx, name); err == nil {
			t.Fatalf("%q not removed", name)
		}
	}
}
