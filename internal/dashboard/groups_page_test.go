package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// groupedPending enqueues a job of group: the core files it in the
// group's pending set.
func (r *rig) groupedPending(queue, id, group string) {
	r.t.Helper()
	if _, err := r.b.Client().Enqueue(context.Background(), broker.Job{Queue: queue, Kind: "send", ID: id, Group: group}); err != nil {
		r.t.Fatal(err)
	}
}

// A queue's groups page lists its groups, the largest backlogs first, each
// linked to its pending jobs; it finds one by name, refuses a bad name and
// a bad limit, and says 404 for an unknown queue. The queue's page links
// to it and filters its pending jobs by group.
func TestGroupsPage(t *testing.T) {
	r := setup(t, token)
	r.groupedPending("mail", "a1", "acme <eu>")
	r.groupedPending("mail", "b1", "globex")
	r.groupedPending("mail", "b2", "globex")
	if _, err := r.b.Client().Enqueue(context.Background(), broker.Job{Queue: "mail", Kind: "send", ID: "plain"}); err != nil {
		t.Fatal(err)
	}
	r.mr.HSet("fenceq:{mail}:glimits", "globex", "4 - - -")
	c := r.client()
	code, body := r.get(c, "/ui/queues/mail/groups")
	if code != http.StatusOK {
		t.Fatalf("groups page: %d\n%s", code, body)
	}
	globex, acme := strings.Index(body, ">globex</a>"), strings.Index(body, ">acme &lt;eu&gt;</a>")
	if globex < 0 || acme < 0 || globex > acme {
		t.Errorf("want globex (2 ready) before acme <eu> (1), both escaped:\n%s", body)
	}
	if want := `href="/ui/queues/mail?group=globex&amp;state=pending"`; !strings.Contains(body, want) {
		t.Errorf("the group does not link to its pending jobs (%s):\n%s", want, body)
	}
	if !strings.Contains(body, "own limits") || !strings.Contains(body, "Ungrouped pending: <b>1</b>") || !strings.Contains(body, "2 of 2 groups in the rotation") {
		t.Errorf("the page lacks the override badge, the ungrouped count or the listing's figures:\n%s", body)
	}
	code, body = r.get(c, "/ui/queues/mail/groups?group=acme+%3Ceu%3E")
	if code != http.StatusOK || !strings.Contains(body, `<h2 class="name">acme &lt;eu&gt;</h2>`) || strings.Contains(body, "globex") ||
		!strings.Contains(body, `href="/ui/queues/mail?group=acme&#43;%3Ceu%3E&amp;state=pending">its pending jobs</a>`) {
		t.Errorf("find by name (%d):\n%s", code, body)
	}
	code, body = r.get(c, "/ui/queues/mail/groups?group=nobody")
	if code != http.StatusOK || !strings.Contains(body, "No group named <b>nobody</b>") {
		t.Errorf("find a group with nothing (%d):\n%s", code, body)
	}
	for _, bad := range []string{"?group=" + url.QueryEscape(" padded"), "?group=" + strings.Repeat("x", 200), "?limit=0", "?limit=501", "?limit=x"} {
		if code, body := r.get(c, "/ui/queues/mail/groups"+bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400\n%s", bad, code, body)
		}
	}
	if code, _ := r.get(c, "/ui/queues/nope/groups"); code != http.StatusNotFound {
		t.Errorf("an unknown queue's groups: %d, want 404", code)
	}

	code, body = r.get(c, "/ui/queues/mail")
	if code != http.StatusOK || !strings.Contains(body, `<a href="/ui/queues/mail/groups">groups</a>`) {
		t.Errorf("the queue's page (%d) does not link to its groups:\n%s", code, body)
	}
	for _, id := range []string{"plain", "a1", "b1", "b2"} {
		if !strings.Contains(body, ">"+id+"</a>") {
			t.Errorf("the pending tab lacks %s:\n%s", id, body)
		}
	}
	code, body = r.get(c, "/ui/queues/mail?state=pending&group=globex")
	if code != http.StatusOK || !strings.Contains(body, ">b1</a>") || !strings.Contains(body, ">b2</a>") || strings.Contains(body, ">a1</a>") ||
		strings.Contains(body, ">plain</a>") || !strings.Contains(body, "2 pending in group globex") ||
		!strings.Contains(body, `href="/ui/queues/mail/groups?group=globex"`) || strings.Contains(body, "looked at") {
		t.Errorf("the pending jobs of globex (%d):\n%s", code, body)
	}
	if code, _ := r.get(c, "/ui/queues/mail?state=pending&group=%20x"); code != http.StatusBadRequest {
		t.Errorf("a bad group filter: %d, want 400", code)
	}
}
