package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// A job's page names its group beside its kind, escaped; a job without a
// group shows none.
func TestJobPageShowsGroup(t *testing.T) {
	r := setup(t, token)
	ctx := context.Background()
	for _, j := range []broker.Job{
		{Queue: "mail", Kind: "send", ID: "g1", Group: "acme <eu>"},
		{Queue: "mail", Kind: "send", ID: "g0"},
	} {
		if _, err := r.b.Client().Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	c := r.client()
	code, body := r.get(c, "/ui/queues/mail/jobs/g1")
	if want := `· group <b id="group">acme &lt;eu&gt;</b>`; code != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("the grouped job's page (%d) lacks %q:\n%s", code, want, body)
	}
	code, body = r.get(c, "/ui/queues/mail/jobs/g0")
	if code != http.StatusOK || strings.Contains(body, `id="group"`) {
		t.Errorf("the page of a job without a group (%d) shows one:\n%s", code, body)
	}
}

// A queue's page has a Group column when a job of the page has a group,
// and none when no job of it has one.
func TestQueuePageGroupColumn(t *testing.T) {
	r := setup(t, token)
	ctx := context.Background()
	for _, j := range []broker.Job{
		{Queue: "mail", Kind: "send", ID: "g1", Group: "acme"},
		{Queue: "mail", Kind: "send", ID: "g0"},
		{Queue: "plain", Kind: "send", ID: "p0"},
	} {
		if _, err := r.b.Client().Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	c := r.client()
	code, body := r.get(c, "/ui/queues/mail")
	if code != http.StatusOK || !strings.Contains(body, "<th>Group</th>") || !strings.Contains(body, `title="its pending jobs">acme</a></td>`) {
		t.Errorf("the page of a queue with a grouped job (%d) lacks its Group column:\n%s", code, body)
	}
	code, body = r.get(c, "/ui/queues/plain")
	if code != http.StatusOK || strings.Contains(body, "<th>Group</th>") {
		t.Errorf("the page of a queue without groups (%d) has a Group column:\n%s", code, body)
	}
}
