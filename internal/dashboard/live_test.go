package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

var (
	liveAttr = regexp.MustCompile(`data-live="([^"]*)"[^>]*>([^<]*)<`)
	liveURL  = regexp.MustCompile(`<main data-live-url="([^"]*)"`)
)

// liveValues answers the texts a page shows in its live elements, by key,
// and the values its live URL answers now.
func (r *rig) liveValues(path string) (shown, live map[string]string) {
	r.t.Helper()
	c := r.client()
	status, body := r.get(c, path)
	if status != 200 {
		r.t.Fatalf("GET %s: %d", path, status)
	}
	shown = map[string]string{}
	for _, m := range liveAttr.FindAllStringSubmatch(body, -1) {
		shown[html.UnescapeString(m[1])] = html.UnescapeString(m[2])
	}
	u := liveURL.FindStringSubmatch(body)
	if u == nil {
		r.t.Fatalf("%s has no live URL", path)
	}
	status, js := r.get(c, html.UnescapeString(u[1]))
	if status != 200 {
		r.t.Fatalf("GET %s: %d %s", u[1], status, js)
	}
	var v struct{ Values map[string]string }
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		r.t.Fatal(err)
	}
	return shown, v.Values
}

// A live refresh of a page that nothing changed rewrites nothing: each
// figure the live URL answers is the text the page shows, so nothing
// flashes as changed and no box is emptied (a running job's last error,
// whatever its length, a generation above 1,000, six-digit counts).
func TestLiveRefreshMatchesThePage(t *testing.T) {
	r := setup(t, token)
	r.mr.SetTime(time.Date(2026, 12, 3, 9, 30, 0, 0, time.UTC)) // Redis's clock stands still: ages do not move
	ctx := context.Background()
	const q = "billing"
	var jobs []broker.Job
	for i := range 1500 {
		jobs = append(jobs, broker.Job{Queue: q, Kind: "resize", ID: fmt.Sprintf("img-%04d", i)})
	}
	for _, e := range r.b.Client().EnqueueMany(ctx, jobs) {
		if e.Err != nil {
			t.Fatal(e.Err)
		}
	}
	// Generations past 1,000: claim and give back a job many times.
	for range 1100 {
		res, err := r.b.Leases().Claim(ctx, q, 1, time.Minute)
		if err != nil || len(res.Leases) != 1 {
			t.Fatalf("claim: %v", err)
		}
		if _, err := r.b.Leases().Release(ctx, res.Leases[0]); err != nil {
			t.Fatal(err)
		}
	}
	// Running jobs whose earlier attempt failed: errors shorter than the
	// box, about as long, and longer, with characters of several bytes.
	errs := map[string]string{
		"short":  "card declined",
		"none":   "",
		"edge-a": strings.Repeat("é", 253),         // 506 bytes
		"edge-b": strings.Repeat("x", 507) + "日本語", // 516 bytes, a character across the cut
		"long":   strings.Repeat("upstream said no; ", 400),
	}
	for id, msg := range errs {
		if _, err := r.b.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "charge", ID: id, Priority: 10}); err != nil {
			t.Fatal(err)
		}
		res, err := r.b.Leases().Claim(ctx, q, 1, time.Hour)
		if err != nil || len(res.Leases) != 1 || res.Leases[0].ID != id {
			t.Fatalf("claim %s: %v", id, err)
		}
		if msg != "" {
			if _, err := r.b.Leases().Fail(ctx, res.Leases[0], broker.Failure{Error: msg}); err != nil {
				t.Fatal(err)
			}
			if res, err = r.b.Leases().Claim(ctx, q, 1, time.Hour); err != nil || len(res.Leases) != 1 || res.Leases[0].ID != id {
				t.Fatalf("claim %s again: %v", id, err)
			}
		}
	}
	paths := []string{"/ui/", "/ui/queues/" + q, "/ui/queues/" + q + "/leases"}
	for id := range errs {
		paths = append(paths, "/ui/queues/"+q+"/jobs/"+id)
	}
	for _, p := range paths {
		shown, live := r.liveValues(p)
		if len(shown) == 0 {
			t.Fatalf("%s shows no live figure", p)
		}
		for key, text := range shown {
			v, ok := live[key]
			if !ok {
				continue // a figure this page's live URL does not refresh
			}
			if v != text {
				t.Errorf("%s: a live refresh rewrites %s from %q to %q", p, key, cut(text), cut(v))
			}
		}
	}
	// The box shows the start of a long error, and the page the whole.
	_, body := r.get(r.client(), "/ui/queues/"+q+"/jobs/long")
	if !strings.Contains(body, "The whole error, 7200 bytes") || !strings.Contains(body, html.EscapeString(errs["long"])) {
		t.Error("the page of a job with a long last error does not show the whole of it")
	}
}

func cut(s string) string {
	if len(s) > 60 {
		return s[:30] + "…" + s[len(s)-20:]
	}
	return s
}
