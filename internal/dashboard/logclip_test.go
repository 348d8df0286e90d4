package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// TestLoggedValuesAreClipped: what a request sends and the dashboard logs
// (a refused Host, the queue and id of an action) is logged cut short: a
// client that sends 60 KB values writes lines of a few hundred bytes, not
// 60 KB each, into the operator's logs.
func TestLoggedValuesAreClipped(t *testing.T) {
	r := setup(t, token)
	r.deadJob("mail", broker.Job{Kind: "send", ID: "d1"}, "x")
	long := strings.Repeat("q", 60000)
	req, _ := http.NewRequest(http.MethodGet, r.srv.URL+"/ui/", nil)
	req.Host = long + ".example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("a forged Host answered %d, want 421", resp.StatusCode)
	}
	anon := r.client()
	if resp, _ := r.post(anon, "/ui/act/pause", url.Values{"queue": {long[:30000]}, "id": {long[:30000]}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("an action signed out answered %d, want 403", resp.StatusCode)
	}
	c := r.client()
	csrf := r.signIn(c)
	if resp, _ := r.post(c, "/ui/act/pause", url.Values{"csrf": {csrf}, "queue": {long}, "next": {"/ui/"}}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an action on an unknown queue answered %d, want 404", resp.StatusCode)
	}
	if resp, _ := r.post(c, "/ui/act/retry", url.Values{"csrf": {csrf}, "queue": {"mail"}, "id": {long}, "next": {"/ui/"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a retry of a long id answered %d, want 303", resp.StatusCode)
	}
	lines := strings.Split(strings.TrimSpace(r.logs.String()), "\n")
	if len(lines) < 4 {
		t.Fatalf("the dashboard logged %d lines for 4 refused or failed requests:\n%.3000s", len(lines), r.logs.String())
	}
	for _, l := range lines {
		if len(l) > 2000 {
			t.Errorf("a log line of %d bytes: %.300s…", len(l), l)
		}
	}
}
