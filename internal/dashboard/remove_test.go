package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// act posts a form of queue q with the session's CSRF token, and answers
// the page it leads to (the flash message shown there).
func (r *rig) act(c *http.Client, csrf, path string, kv ...string) (int, string) {
	r.t.Helper()
	v := url.Values{"queue": {"q"}, "csrf": {csrf}, "next": {"/ui/queues/q"}}
	for i := 0; i < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	resp, body := r.post(c, path, v)
	if resp.StatusCode != http.StatusSeeOther {
		return resp.StatusCode, body
	}
	_, body = r.get(c, resp.Header.Get("Location"))
	return http.StatusSeeOther, html.UnescapeString(body)
}

func (r *rig) enqueue(j broker.Job) {
	r.t.Helper()
	j.Queue, j.Kind = "q", "k"
	if _, err := r.b.Client().Enqueue(context.Background(), j); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) gone(id string) bool {
	_, err := r.b.Inspector().Job(context.Background(), "q", id)
	return errors.Is(err, broker.ErrJobNotFound)
}

func TestDeleteAndPromotePages(t *testing.T) {
	r := setup(t, token)
	c := r.client()
	csrf := r.signIn(c)
	r.deadJob("q", broker.Job{Kind: "k", ID: "d1"}, "boom")
	r.enqueue(broker.Job{ID: "later", Delay: time.Hour})

	// The job page offers both; the confirmation carries the state seen.
	_, body := r.get(c, "/ui/queues/q/jobs/later")
	if !strings.Contains(body, `id="promote"`) || !strings.Contains(body, `href="/ui/queues/q/jobs/later/delete"`) {
		t.Fatal("a scheduled job's page offers no promote or delete")
	}
	code, body := r.get(c, "/ui/queues/q/jobs/d1/delete")
	if code != 200 || !strings.Contains(body, "Delete job d1?") || !strings.Contains(body, `name="state" value="dead"`) {
		t.Fatalf("delete confirmation: %d\n%s", code, body)
	}
	if r.gone("d1") {
		t.Fatal("the confirmation page deleted the job")
	}
	_, body = r.act(c, csrf, "/ui/act/delete", "id", "d1", "state", "pending")
	if !strings.Contains(body, "Job d1 not deleted: is dead now, not pending.") || r.gone("d1") {
		t.Fatalf("a delete fenced on another state: %s", flash(body))
	}
	_, body = r.act(c, csrf, "/ui/act/delete", "id", "d1", "state", "dead")
	if !strings.Contains(body, "Job d1 (dead) deleted.") || !r.gone("d1") {
		t.Fatalf("delete: %s", flash(body))
	}
	_, body = r.act(c, csrf, "/ui/act/promote", "id", "later")
	if !strings.Contains(body, "Job later is pending now") || r.state("q", "later") != broker.StatePending {
		t.Fatalf("promote: %s", flash(body))
	}
	_, body = r.act(c, csrf, "/ui/act/promote", "id", "later")
	if !strings.Contains(body, "not promoted: is pending: only a scheduled job can be promoted") {
		t.Fatalf("promote of a pending job: %s", flash(body))
	}

	// A running job: no delete button, and its confirmation page refuses.
	if _, err := r.b.Leases().Claim(context.Background(), "q", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	_, body = r.get(c, "/ui/queues/q/jobs/later")
	if strings.Contains(body, `id="delete"`) {
		t.Fatal("a running job's page offers delete")
	}
	_, body = r.get(c, "/ui/queues/q/jobs/later/delete")
	if !strings.Contains(body, `id="refusal"`) || strings.Contains(body, `id="confirm"`) {
		t.Fatal("a running job's delete confirmation offers the button")
	}
}

func TestPurgePage(t *testing.T) {
	r := setup(t, token)
	c := r.client()
	csrf := r.signIn(c)
	for i := range 3 {
		r.deadJob("q", broker.Job{Kind: "k", ID: fmt.Sprint("d", i)}, "boom")
	}
	r.enqueue(broker.Job{ID: "p"})
	_, body := r.get(c, "/ui/queues/q?state=dead")
	if !strings.Contains(body, `href="/ui/queues/q/purge?state=dead"`) {
		t.Fatal("the dead tab offers no purge")
	}
	_, body = r.get(c, "/ui/queues/q?state=pending")
	if strings.Contains(body, `id="purge"`) {
		t.Fatal("the pending tab offers a purge")
	}
	code, body := r.get(c, "/ui/queues/q/purge?state=dead")
	if code != 200 || !strings.Contains(body, "Purge the 3 dead job(s) of q?") {
		t.Fatalf("purge confirmation: %d %s", code, body)
	}
	through := hiddenFields(body).Get("through")
	if code, _ := r.get(c, "/ui/queues/q/purge?state=pending"); code != http.StatusBadRequest {
		t.Fatalf("purge confirmation of pending: %d", code)
	}
	// Just dead, they are left for the re-send horizon, and it says so.
	_, body = r.act(c, csrf, "/ui/act/purge", "state", "dead", "through", through)
	if !strings.Contains(body, "Purged 0 dead job(s) of q. 3 were kept: they finished in the last 5s") || r.gone("d0") {
		t.Fatalf("purge within the horizon: %s", flash(body))
	}
	r.mr.SetTime(time.Now().Add(broker.ResendHorizon + time.Second))
	_, body = r.act(c, csrf, "/ui/act/purge", "state", "dead", "through", through)
	if !strings.Contains(body, "Purged 3 dead job(s) of q.") || !r.gone("d0") || r.gone("p") {
		t.Fatalf("purge: %s", flash(body))
	}
	_, body = r.act(c, csrf, "/ui/act/purge", "state", "pending")
	if !strings.Contains(body, `Nothing purged: "pending" cannot be purged`) || r.gone("p") {
		t.Fatalf("purge of pending: %s", flash(body))
	}
}

func TestBulkActions(t *testing.T) {
	r := setup(t, token)
	c := r.client()
	csrf := r.signIn(c)
	for i := range 3 {
		r.deadJob("q", broker.Job{Kind: "k", ID: fmt.Sprint("d", i)}, "boom")
	}
	_, body := r.get(c, "/ui/queues/q?state=dead")
	for _, want := range []string{`id="select-all"`, `id="bulk-retry"`, `id="bulk-delete"`, `name="state" value="dead"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the dead tab lacks %s", want)
		}
	}
	if strings.Contains(body, `id="bulk-promote"`) || strings.Contains(body, `id="bulk-cancel"`) {
		t.Error("the dead tab offers promote or cancel")
	}

	// Delete asks first, listing the jobs; duplicates count once.
	code, body := r.act(c, csrf, "/ui/act/bulk", "op", "delete", "state", "dead", "id", "d0", "id", "d1", "id", "d1")
	if code != 200 || !strings.Contains(body, "Delete 2 dead job(s) of q?") || r.gone("d0") {
		t.Fatalf("bulk delete before its confirmation: %d\n%s", code, body)
	}
	// Meanwhile d1 is retried: the delete leaves it.
	if _, err := r.b.Inspector().Retry(context.Background(), "q", "d1"); err != nil {
		t.Fatal(err)
	}
	_, body = r.act(c, csrf, "/ui/act/bulk", "op", "delete", "state", "dead", "confirm", "1", "id", "d0", "id", "d1", "id", "nope")
	if !strings.Contains(body, "Deleted 1 of 3. Refused 2: d1 is pending now, not dead; nope is not there") {
		t.Fatalf("bulk delete: %s", flash(body))
	}
	if !r.gone("d0") || r.gone("d1") {
		t.Fatal("bulk delete deleted the wrong jobs")
	}
	_, body = r.act(c, csrf, "/ui/act/bulk", "op", "retry", "state", "dead", "id", "d2", "id", "d1")
	if !strings.Contains(body, "Retried 1 of 2. Refused 1: d1 is pending; only dead or cancelled jobs can be retried.") {
		t.Fatalf("bulk retry: %s", flash(body))
	}

	r.enqueue(broker.Job{ID: "s1", Delay: time.Hour})
	r.enqueue(broker.Job{ID: "s2", Delay: time.Hour})
	_, body = r.get(c, "/ui/queues/q?state=scheduled")
	if !strings.Contains(body, `id="bulk-promote"`) || !strings.Contains(body, `id="bulk-cancel"`) {
		t.Fatal("the scheduled tab offers no promote or cancel")
	}
	_, body = r.act(c, csrf, "/ui/act/bulk", "op", "promote", "state", "scheduled", "id", "s1", "id", "s2", "id", "d2")
	if !strings.Contains(body, "Promoted 2 of 3. Refused 1: d2 is pending: only a scheduled job can be promoted.") {
		t.Fatalf("bulk promote: %s", flash(body))
	}
	_, body = r.act(c, csrf, "/ui/act/bulk", "op", "cancel", "state", "pending", "id", "s1", "id", "s2")
	if !strings.Contains(body, "Cancelled 2 of 2.") || r.state("q", "s1") != broker.StateCancelled {
		t.Fatalf("bulk cancel: %s", flash(body))
	}

	// Refusals that change nothing, each saying why.
	many := []string{"op", "cancel", "state", "pending"}
	for i := range broker.PageLimitMax + 1 {
		many = append(many, "id", fmt.Sprint("x", i))
	}
	for _, tc := range []struct {
		kv   []string
		want string
	}{
		{[]string{"op", "explode", "id", "s1"}, `"explode" is not a bulk action`},
		{[]string{"op", "cancel"}, "no job was selected"},
		{[]string{"op", "delete", "state", "bogus", "id", "s1"}, `"bogus" is not a job state`},
		{many, fmt.Sprintf("%d jobs selected, at most %d at a time", broker.PageLimitMax+1, broker.PageLimitMax)},
	} {
		if _, body := r.act(c, csrf, "/ui/act/bulk", tc.kv...); !strings.Contains(body, "Nothing done: ") || !strings.Contains(body, tc.want) {
			t.Errorf("bulk %v: %s", tc.kv[:2], flash(body))
		}
	}
	// Without the CSRF token: refused.
	resp, _ := r.post(c, "/ui/act/bulk", url.Values{"queue": {"q"}, "op": {"delete"}, "confirm": {"1"}, "id": {"d2"}})
	if resp.StatusCode != http.StatusForbidden || r.gone("d2") {
		t.Fatalf("bulk delete without a CSRF token: %d", resp.StatusCode)
	}
}

func TestReadOnlyShowsNoRemoveButtons(t *testing.T) {
	r := setup(t, "")
	c := r.client()
	r.deadJob("q", broker.Job{Kind: "k", ID: "d1"}, "boom")
	r.enqueue(broker.Job{ID: "later", Delay: time.Hour})
	for _, path := range []string{"/ui/queues/q?state=dead", "/ui/queues/q?state=scheduled", "/ui/queues/q/jobs/d1", "/ui/queues/q/jobs/later", "/ui/queues/q/jobs/d1/delete", "/ui/queues/q/purge?state=dead"} {
		_, body := r.get(c, path)
		for _, b := range []string{`id="bulk`, `id="select-all"`, `id="purge"`, `id="delete"`, `id="promote"`, `id="confirm"`} {
			if strings.Contains(body, b) {
				t.Errorf("read-only %s shows %s", path, b)
			}
		}
	}
	resp, _ := r.post(c, "/ui/act/bulk", url.Values{"queue": {"q"}, "op": {"delete"}, "confirm": {"1"}, "id": {"d1"}})
	if resp.StatusCode != http.StatusForbidden || r.gone("d1") {
		t.Fatalf("read-only bulk delete: %d", resp.StatusCode)
	}
}

// flash is the flash message of a page, for a failure's message.
func flash(body string) string {
	if i := strings.Index(body, `class="flash"`); i >= 0 {
		end := strings.Index(body[i:], "</p>")
		if end > 0 {
			return body[i : i+end]
		}
	}
	return "(no flash message)"
}

// hiddenFields are the hidden inputs of a page's forms, as a browser would
// send them back.
func hiddenFields(body string) url.Values {
	v := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(body, -1) {
		v.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	return v
}

// A purge confirmation sent again later (the browser's back and resubmit,
// a second tab left open, a replayed request) purges only the jobs its
// page counted: not the ones that reached the state after it was shown.
// (It purged every job dead at the time of the replay: the page said 2.)
func TestPurgeConfirmationReplayed(t *testing.T) {
	r := setup(t, token)
	c := r.client()
	r.signIn(c)
	r.deadJob("q", broker.Job{Kind: "k", ID: "d0"}, "boom")
	r.deadJob("q", broker.Job{Kind: "k", ID: "d1"}, "boom")
	_, page := r.get(c, "/ui/queues/q/purge?state=dead")
	if !strings.Contains(page, "Purge the 2 dead job(s) of q?") {
		t.Fatalf("purge confirmation:\n%s", page)
	}
	form := hiddenFields(page)
	time.Sleep(5 * time.Millisecond) // the index is scored in ms
	r.deadJob("q", broker.Job{Kind: "k", ID: "later"}, "boom")
	// Past the re-send horizon, which a purge may also keep jobs for.
	r.mr.SetTime(time.Now().Add(broker.ResendHorizon + time.Second))

	resp, _ := r.post(c, "/ui/act/purge", form)
	_, body := r.get(c, resp.Header.Get("Location"))
	body = html.UnescapeString(body)
	if !strings.Contains(body, "Purged 2 dead job(s) of q.") || !r.gone("d0") || !r.gone("d1") || r.gone("later") {
		t.Fatalf("purge: %s; later gone: %v", flash(body), r.gone("later"))
	}
	// The same form again deletes nothing more.
	resp, _ = r.post(c, "/ui/act/purge", form)
	_, body = r.get(c, resp.Header.Get("Location"))
	if r.gone("later") || !strings.Contains(html.UnescapeString(body), "Purged 0 dead job(s)") {
		t.Fatalf("replayed purge: %s", flash(html.UnescapeString(body)))
	}
	// A form that does not say when its page was shown purges nothing.
	form.Del("through")
	resp, _ = r.post(c, "/ui/act/purge", form)
	_, body = r.get(c, resp.Header.Get("Location"))
	if r.gone("later") || !strings.Contains(html.UnescapeString(body), "Nothing purged") {
		t.Fatalf("purge without through: %s", flash(html.UnescapeString(body)))
	}
}

// A bulk action on a whole page of jobs with long ids goes through: the
// form of 500 ids of 200 bytes is over 64 KiB. (It was refused: "The form
// could not be read: http: request body too large".) A form over even the
// bulk bound says what to do.
func TestBulkWholePageOfLongIDs(t *testing.T) {
	r := setup(t, token)
	c := r.client()
	csrf := r.signIn(c)
	jobs := make([]broker.Job, broker.PageLimitMax)
	kv := []string{"op", "cancel", "state", "pending"}
	for i := range jobs {
		id := fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 196))
		jobs[i] = broker.Job{Queue: "q", Kind: "k", ID: id}
		kv = append(kv, "id", id)
	}
	for _, e := range r.b.Client().EnqueueMany(context.Background(), jobs) {
		if e.Err != nil {
			t.Fatal(e.Err)
		}
	}
	_, body := r.act(c, csrf, "/ui/act/bulk", kv...)
	if want := fmt.Sprintf("Cancelled %d of %d.", broker.PageLimitMax, broker.PageLimitMax); !strings.Contains(body, want) {
		t.Fatalf("bulk cancel of a page of long ids: %s", flash(body))
	}
	// Without a session, the form is bounded as any other: 64 KiB.
	resp, body := r.post(r.client(), "/ui/act/bulk", url.Values{"id": {strings.Repeat("y", 70<<10)}})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(html.UnescapeString(body), "over 64 KiB") {
		t.Fatalf("a large form without a session: %d %s", resp.StatusCode, body)
	}
	// With one, over the bulk bound: refused, saying what to do.
	code, body := r.act(c, csrf, "/ui/act/bulk", "op", "cancel", "id", strings.Repeat("y", 2<<20))
	if code != http.StatusForbidden || !strings.Contains(body, "select fewer jobs") {
		t.Fatalf("a form over the bulk bound: %d %s", code, body)
	}
}

// A bulk form of thousands of short ids is refused at once, without
// comparing each id with every other, and one of more fields than
// net/url parses (10,000) says what to do. (It said "number of URL query
// parameters exceeded limit".)
func TestBulkManyShortIDs(t *testing.T) {
	r := setup(t, token)
	c := r.client()
	csrf := r.signIn(c)
	r.enqueue(broker.Job{ID: "p"})
	for _, c2 := range []struct {
		n    int
		want string
	}{{9000, fmt.Sprintf("Nothing done: 9000 jobs selected, at most %d at a time.", broker.PageLimitMax)}, {20000, "more fields than an action takes: select fewer jobs"}} {
		kv := []string{"op", "cancel", "state", "pending"}
		for i := range c2.n {
			kv = append(kv, "id", strconv.Itoa(i))
		}
		start := time.Now()
		_, body := r.act(c, csrf, "/ui/act/bulk", kv...)
		if !strings.Contains(body, c2.want) {
			t.Fatalf("a form of %d ids: %s", c2.n, body[:min(len(body), 3000)])
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Errorf("%d ids took %v", c2.n, el)
		}
	}
	if r.state("q", "p") != broker.StatePending {
		t.Error("a refused form changed a job")
	}
}
