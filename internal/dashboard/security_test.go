package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// Every page, live update and action about a queue that has never had a
// job answers 404 and leaves Redis as it was.
func TestUnknownQueue404(t *testing.T) {
	r := setup(t, token)
	r.deadJob("mail", broker.Job{Kind: "send", ID: "d1"}, "x")
	c := r.client()
	csrf := r.signIn(c)
	before := r.mr.Keys()
	for _, path := range []string{
		"/ui/queues/nope",
		"/ui/queue?queue=nope",
		"/ui/queues/nope/leases",
		"/ui/queue?queue=nope&view=leases",
		"/ui/queues/nope/jobs/d1",
		"/ui/job?queue=nope&id=d1",
		"/ui/queues/nope/jobs/d1/release",
		"/ui/job?queue=nope&id=d1&view=release",
		"/ui/live?queue=nope",
		"/ui/live?queue=nope&job=d1",
		"/ui/live?queue=&job=d1",
	} {
		code, body := r.get(c, path)
		if code != http.StatusNotFound || !strings.Contains(body, "nope") && !strings.Contains(body, "queue") {
			t.Errorf("GET %s = %d; want 404 naming the queue:\n%s", path, code, body)
		}
	}
	for _, act := range []string{"retry", "cancel", "release", "retry-dead", "pause", "resume", "limits"} {
		resp, body := r.post(c, "/ui/act/"+act, url.Values{"csrf": {csrf}, "queue": {"nope"}, "id": {"d1"}, "max_running": {"3"}, "next": {"/ui/"}})
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "nope") || !strings.Contains(body, "Nothing was changed") {
			t.Errorf("POST /ui/act/%s on an unknown queue = %d; want 404 naming it:\n%s", act, resp.StatusCode, body)
		}
	}
	if after := r.mr.Keys(); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("requests about an unknown queue changed the keys from\n%q to\n%q", before, after)
	}
	if ok, err := r.b.Paused(context.Background(), "nope"); err != nil || ok {
		t.Errorf("the unknown queue is paused=%v (%v)", ok, err)
	}
}
