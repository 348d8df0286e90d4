package dashboard_test

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/dashboard"
)

const token = "s3cret-admin-token"

// rig is a dashboard on miniredis, served by httptest.
type rig struct {
	t    *testing.T
	b    *broker.Broker
	mr   *miniredis.Miniredis
	srv  *httptest.Server
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func setup(t *testing.T, tok string) *rig {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	d, err := dashboard.New(dashboard.Config{Inspector: b.Inspector(), Token: tok, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return &rig{t: t, b: b, mr: mr, srv: srv, logs: logs}
}

// deadJob enqueues a job and fails it for good.
func (r *rig) deadJob(queue string, j broker.Job, msg string) {
	r.t.Helper()
	ctx := context.Background()
	j.Queue = queue
	if _, err := r.b.Client().Enqueue(ctx, j); err != nil {
		r.t.Fatal(err)
	}
	res, err := r.b.Leases().Claim(ctx, queue, 1, time.Minute)
	if err != nil || len(res.Leases) != 1 {
		r.t.Fatalf("claim: %v, %d leases", err, len(res.Leases))
	}
	if _, err := r.b.Leases().Fail(ctx, res.Leases[0], broker.Failure{Error: msg, Dead: true}); err != nil {
		r.t.Fatal(err)
	}
}

// client is a browser: it keeps cookies and does not follow redirects.
func (r *rig) client() *http.Client {
	jar := newJar()
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (r *rig) get(c *http.Client, path string) (int, string) {
	r.t.Helper()
	resp, err := c.Get(r.srv.URL + path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (r *rig) post(c *http.Client, path string, form url.Values) (*http.Response, string) {
	r.t.Helper()
	resp, err := c.PostForm(r.srv.URL+path, form)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// signIn signs c in and answers the CSRF token its pages carry.
func (r *rig) signIn(c *http.Client) string {
	r.t.Helper()
	resp, _ := r.post(c, "/ui/login", url.Values{"token": {token}, "next": {"/ui/"}})
	if resp.StatusCode != http.StatusSeeOther {
		r.t.Fatalf("sign-in answered %d, want 303", resp.StatusCode)
	}
	_, body := r.get(c, "/ui/")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		r.t.Fatal("a signed-in page carries no CSRF token")
	}
	return m[1]
}

func (r *rig) state(queue, id string) broker.State {
	r.t.Helper()
	j, err := r.b.Inspector().Job(context.Background(), queue, id)
	if err != nil {
		r.t.Fatal(err)
	}
	return j.State
}

func TestPagesRender(t *testing.T) {
	r := setup(t, token)
	ctx := context.Background()
	r.deadJob("mail", broker.Job{Kind: "send", ID: "d1", Payload: []byte(`{"to":"a@example.com"}`)}, "smtp: 550 no such user")
	if _, err := r.b.Client().Enqueue(ctx, broker.Job{Queue: "mail", Kind: "send", ID: "p1", DependsOn: []string{"d0"}}); err == nil {
		t.Fatal("a job depending on a missing one was enqueued")
	}
	for _, j := range []broker.Job{
		{Queue: "mail", Kind: "send", ID: "parent"},
		{Queue: "mail", Kind: "send", ID: "child", DependsOn: []string{"parent"}, UniqueKey: "welcome-7"},
		{Queue: "mail", Kind: "digest", ID: "later", Delay: time.Hour},
	} {
		if _, err := r.b.Client().Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.b.Leases().Claim(ctx, "mail", 1, time.Minute); err != nil { // parent runs
		t.Fatal(err)
	}
	c := r.client()
	for _, tc := range []struct{ path, want string }{
		{"/ui/", `href="/ui/queues/mail"`},
		{"/ui/", "smtp"[:0] + `data-live="dead|mail">1<`},
		{"/ui/queues/mail", "No pending jobs"},
		{"/ui/queues/mail?state=dead", "smtp: 550 no such user"},
		{"/ui/queues/mail?state=scheduled", `href="/ui/queues/mail/jobs/later"`},
		{"/ui/queues/mail?state=running", `href="/ui/queues/mail/jobs/parent"`},
		{"/ui/queues/mail?state=blocked", `href="/ui/queues/mail/jobs/child"`},
		{"/ui/queues/mail/jobs/d1", "&#34;to&#34;: &#34;a@example.com&#34;"},
		{"/ui/queues/mail/jobs/d1", "Events are off for this queue"},
		{"/ui/queues/mail/jobs/parent", "left (generation"},
		{"/ui/queues/mail/jobs/parent", `href="/ui/queues/mail/jobs/child"`},
		{"/ui/queues/mail/jobs/child", `href="/ui/queues/mail/jobs/parent"`},
		{"/ui/queues/mail/jobs/child", "welcome-7"},
		{"/ui/queues/mail/leases", `href="/ui/queues/mail/jobs/parent"`},
		{"/ui/queues/mail/jobs/parent/release", "Force release job"},
		{"/ui/login", `name="token"`},
		{"/ui/static/style.css", "--accent"},
		{"/ui/live?queue=mail", `"dead|mail":"1"`},
		{"/ui/live?queue=mail&job=parent", `"job|state":"running"`},
	} {
		code, body := r.get(c, tc.path)
		if code != http.StatusOK || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d; want 200 with %q in:\n%s", tc.path, code, tc.want, body)
		}
	}
}

func TestQueuePages(t *testing.T) {
	r := setup(t, "")
	ctx := context.Background()
	jobs := make([]broker.Job, 120)
	for i := range jobs {
		kind := "resize"
		if i%40 == 7 {
			kind = "crop"
		}
		jobs[i] = broker.Job{Queue: "img", Kind: kind, ID: fmt.Sprintf("img-%03d", i)}
	}
	for _, e := range r.b.Client().EnqueueMany(ctx, jobs) {
		if e.Err != nil {
			t.Fatal(e.Err)
		}
	}
	c := r.client()
	next := regexp.MustCompile(`<a href="([^"]+)">Next page`)
	rows := regexp.MustCompile(`<td class="id"><a href="[^"]+">([^<]+)</a>`)
	var seen []string
	path := "/ui/queues/img?state=pending"
	for pages := 0; path != ""; pages++ {
		if pages > 5 {
			t.Fatal("the pages do not end")
		}
		code, body := r.get(c, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		for _, m := range rows.FindAllStringSubmatch(body, -1) {
			seen = append(seen, m[1])
		}
		path = ""
		if m := next.FindStringSubmatch(body); m != nil {
			path = html.UnescapeString(m[1])
			if !strings.Contains(body, "First page") && pages > 0 {
				t.Error("a later page has no link back to the first")
			}
		}
	}
	if len(seen) != 120 || seen[0] != "img-000" || seen[119] != "img-119" {
		t.Fatalf("paging through pending saw %d jobs, %v … %v; want img-000 … img-119", len(seen), seen[:min(3, len(seen))], seen[max(0, len(seen)-3):])
	}
	_, body := r.get(c, "/ui/queues/img?state=pending&kind=crop&order=newest")
	var crops []string
	for _, m := range rows.FindAllStringSubmatch(body, -1) {
		crops = append(crops, m[1])
	}
	if want := []string{"img-087", "img-047", "img-007"}; !slices.Equal(crops, want) {
		t.Fatalf("kind crop, newest first: %v, want %v", crops, want)
	}
	if !strings.Contains(body, `value="crop"`) {
		t.Error("the filter form does not keep the kind")
	}
}

// TestHistory: the overview charts done and failed per minute, and a job's
// page lists each failed attempt's error and its claim's renewals.
func TestHistory(t *testing.T) {
	r := setup(t, "")
	ctx := context.Background()
	if _, err := r.b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", ID: "flaky", MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		res, err := r.b.Leases().Claim(ctx, "q", 1, time.Minute)
		if err != nil || len(res.Leases) != 1 {
			t.Fatalf("claim %d: %v", attempt, err)
		}
		if _, err := r.b.Leases().Fail(ctx, res.Leases[0], broker.Failure{Error: fmt.Sprintf("<timeout %d>", attempt)}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := r.b.Leases().Claim(ctx, "q", 1, time.Minute)
	if err != nil || len(res.Leases) != 1 {
		t.Fatalf("third claim: %v", err)
	}
	for range 3 {
		if _, err := r.b.Leases().Renew(ctx, res.Leases, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", ID: "ok"}); err != nil {
		t.Fatal(err)
	}
	ok, err := r.b.Leases().Claim(ctx, "q", 1, time.Minute)
	if err != nil || len(ok.Leases) != 1 {
		t.Fatalf("claim ok: %v", err)
	}
	if _, err := r.b.Leases().Ack(ctx, ok.Leases[0], nil); err != nil {
		t.Fatal(err)
	}
	c := r.client()
	_, body := r.get(c, "/ui/queues/q/jobs/flaky")
	for _, want := range []string{"Errors by attempt", "&lt;timeout 1&gt;", "&lt;timeout 2&gt;", `data-live="job|renewals">3<`} {
		if !strings.Contains(body, want) {
			t.Errorf("the job's page lacks %q", want)
		}
	}
	_, body = r.get(c, "/ui/")
	if !strings.Contains(body, `<svg class="chart"`) || !strings.Contains(body, "1 done, 2 failed") {
		t.Errorf("the overview's chart does not show 1 done and 2 failed:\n%s", body)
	}
}

func TestEventsOfAJob(t *testing.T) {
	r := setup(t, "")
	ctx := context.Background()
	if err := r.b.Inspector().SetEvents(ctx, "q", 100); err != nil {
		t.Fatal(err)
	}
	r.deadJob("q", broker.Job{Kind: "k", ID: "e1"}, "boom")
	_, body := r.get(r.client(), "/ui/queues/q/jobs/e1")
	for _, want := range []string{"<td>enqueued</td>", "<td>started</td>", "<td>dead</td>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the job's page lacks the event %s", want)
		}
	}
}

func TestNotFound(t *testing.T) {
	r := setup(t, "")
	r.deadJob("mail", broker.Job{Kind: "send", ID: "d1"}, "x")
	c := r.client()
	for _, tc := range []struct{ path, want string }{
		{"/ui/queues/nope", `No queue named &#34;nope&#34;`},
		{"/ui/queues/nope/jobs/d1", `No queue named &#34;nope&#34;`},
		{"/ui/queues/mail/jobs/ghost", `job &#34;ghost&#34; in queue &#34;mail&#34;: job not found`},
		{"/ui/queues/mail/leases/extra", "There is no dashboard page"},
		{"/ui/queue?queue=", "Name a queue"},
	} {
		code, body := r.get(c, tc.path)
		if code != http.StatusNotFound || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d; want 404 saying %q in:\n%s", tc.path, code, tc.want, body)
		}
	}
	code, body := r.get(c, "/ui/queues/mail?state=bogus")
	if code != http.StatusBadRequest || !strings.Contains(body, "is not a job state") {
		t.Errorf("an unknown state answered %d:\n%s", code, body)
	}
	code, body = r.get(c, "/ui/queues/mail?state=dead&after=garbage")
	if code != http.StatusBadRequest || !strings.Contains(body, "start from the first page") {
		t.Errorf("a bad cursor answered %d:\n%s", code, body)
	}
}

func TestCorruptJob(t *testing.T) {
	r := setup(t, "")
	r.deadJob("mail", broker.Job{Kind: "send", ID: "d1"}, "x")
	r.mr.HSet("fenceq:{mail}:job:d1", "state", "<weird>")
	code, body := r.get(r.client(), "/ui/queues/mail/jobs/d1")
	if code != http.StatusInternalServerError || !strings.Contains(body, "corrupt job") || !strings.Contains(body, "workerd check") || strings.Contains(body, "<weird>") {
		t.Fatalf("a corrupt job's page: %d\n%s", code, body)
	}
}

func TestReadOnly(t *testing.T) {
	r := setup(t, "")
	r.deadJob("mail", broker.Job{Kind: "send", ID: "d1"}, "x")
	c := r.client()
	for _, path := range []string{"/ui/", "/ui/queues/mail?state=dead", "/ui/queues/mail/jobs/d1"} {
		_, body := r.get(c, path)
		if strings.Contains(body, `action="/ui/act/`) {
			t.Errorf("read-only %s offers an action form", path)
		}
		if !strings.Contains(body, "read-only") {
			t.Errorf("read-only %s does not say it is read-only", path)
		}
	}
	for _, act := range []string{"retry", "cancel", "release", "retry-dead", "pause", "resume", "limits", "group-limits"} {
		resp, body := r.post(c, "/ui/act/"+act, url.Values{"queue": {"mail"}, "id": {"d1"}, "csrf": {"anything"}})
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("read-only POST %s answered %d:\n%s", act, resp.StatusCode, body)
		}
	}
	if got := r.state("mail", "d1"); got != broker.StateDead {
		t.Fatalf("after refused actions the job is %s, want dead", got)
	}
	if paused, _ := r.b.Inspector().Paused(context.Background(), "mail"); paused {
		t.Fatal("a refused pause paused the queue")
	}
	if !strings.Contains(r.logs.String(), "action refused") {
		t.Error("refused actions are not logged")
	}
	resp, _ := r.post(c, "/ui/login", url.Values{"token": {""}})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in on a read-only dashboard answered %d, want 403", resp.StatusCode)
	}
}

func TestActionsNeedSessionAndCSRF(t *testing.T) {
	r := setup(t, token)
	r.deadJob("mail", broker.Job{Kind: "send", ID: "d1"}, "x")
	anon := r.client()

	t.Run("not signed in: no forms, and a POST is refused", func(t *testing.T) {
		_, body := r.get(anon, "/ui/queues/mail/jobs/d1")
		if strings.Contains(body, `action="/ui/act/`) || !strings.Contains(body, "Sign in") {
			t.Errorf("a signed-out job page offers actions or no sign-in")
		}
		resp, _ := r.post(anon, "/ui/act/retry", url.Values{"queue": {"mail"}, "id": {"d1"}})
		if resp.StatusCode != http.StatusForbidden || r.state("mail", "d1") != broker.StateDead {
			t.Errorf("a signed-out retry answered %d and left the job %s", resp.StatusCode, r.state("mail", "d1"))
		}
	})

	t.Run("a wrong token does not sign in", func(t *testing.T) {
		c := r.client()
		resp, body := r.post(c, "/ui/login", url.Values{"token": {token + "x"}})
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not the admin token") {
			t.Errorf("a wrong token answered %d", resp.StatusCode)
		}
		if len(resp.Cookies()) != 0 {
			t.Errorf("a wrong token set cookies %v", resp.Cookies())
		}
	})

	c := r.client()
	resp, _ := r.post(c, "/ui/login", url.Values{"token": {token}, "next": {"https://evil.example/"}})
	if loc := resp.Header.Get("Location"); loc != "/ui/" {
		t.Errorf("sign-in with next pointing elsewhere redirected to %q, want /ui/", loc)
	}
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "fenceq_ui_session" {
			session = ck
		}
	}
	switch {
	case session == nil:
		t.Fatal("sign-in set no session cookie")
	case !session.HttpOnly || session.SameSite != http.SameSiteStrictMode:
		t.Errorf("session cookie is HttpOnly=%v SameSite=%v; want HttpOnly, Strict", session.HttpOnly, session.SameSite)
	case strings.Contains(session.Value, token):
		t.Error("the session cookie holds the token")
	}
	_, body := r.get(c, "/ui/queues/mail/jobs/d1")
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if csrf == nil || !strings.Contains(body, `action="/ui/act/retry"`) {
		t.Fatal("a signed-in job page of a dead job offers no retry form")
	}

	t.Run("a POST without the CSRF token, or with another, is refused", func(t *testing.T) {
		for _, tok := range []string{"", "forged", csrf[1] + "x"} {
			resp, body := r.post(c, "/ui/act/retry", url.Values{"queue": {"mail"}, "id": {"d1"}, "csrf": {tok}})
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
				t.Errorf("retry with csrf %q answered %d", tok, resp.StatusCode)
			}
		}
		if r.state("mail", "d1") != broker.StateDead {
			t.Fatal("a forged retry changed the job")
		}
	})

	t.Run("a POST from another origin is refused", func(t *testing.T) {
		req, _ := http.NewRequest("POST", r.srv.URL+"/ui/act/retry", strings.NewReader(url.Values{"queue": {"mail"}, "id": {"d1"}, "csrf": {csrf[1]}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "https://evil.example")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || r.state("mail", "d1") != broker.StateDead {
			t.Errorf("a cross-origin retry answered %d", resp.StatusCode)
		}
	})

	t.Run("a GET never acts", func(t *testing.T) {
		code, _ := r.get(c, "/ui/act/retry?queue=mail&id=d1&csrf="+url.QueryEscape(csrf[1]))
		if code != http.StatusMethodNotAllowed || r.state("mail", "d1") != broker.StateDead {
			t.Errorf("GET of an action answered %d", code)
		}
	})

	t.Run("with the session's CSRF token the action runs and is logged", func(t *testing.T) {
		resp, _ := r.post(c, "/ui/act/retry", url.Values{"queue": {"mail"}, "id": {"d1"}, "csrf": {csrf[1]}, "next": {"/ui/queues/mail/jobs/d1"}})
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/queues/mail/jobs/d1" {
			t.Fatalf("retry answered %d to %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		if got := r.state("mail", "d1"); got != broker.StatePending {
			t.Fatalf("after retry the job is %s, want pending", got)
		}
		_, body := r.get(c, "/ui/queues/mail/jobs/d1")
		if !strings.Contains(body, "Job d1 was dead and runs again.") {
			t.Error("the page after the retry does not say what it did")
		}
		if logs := r.logs.String(); !strings.Contains(logs, "action=retry") || !strings.Contains(logs, "id=d1") || !strings.Contains(logs, "remote=") {
			t.Errorf("the action's log line lacks who, what or which job:\n%s", logs)
		}
	})

	t.Run("queue actions", func(t *testing.T) {
		form := func(kv ...string) url.Values {
			v := url.Values{"queue": {"mail"}, "csrf": {csrf[1]}}
			for i := 0; i < len(kv); i += 2 {
				v.Add(kv[i], kv[i+1])
			}
			return v
		}
		ctx := context.Background()
		r.post(c, "/ui/act/pause", form())
		if p, _ := r.b.Inspector().Paused(ctx, "mail"); !p {
			t.Error("pause did not pause")
		}
		r.post(c, "/ui/act/resume", form())
		if p, _ := r.b.Inspector().Paused(ctx, "mail"); p {
			t.Error("resume did not resume")
		}
		r.post(c, "/ui/act/limits", form("max_running", "3", "rate", "10", "per", "1s"))
		if l, _ := r.b.Inspector().Limits(ctx, "mail"); l != (broker.Limits{MaxRunning: 3, Rate: 10, Per: time.Second}) {
			t.Errorf("limits = %+v", l)
		}
		r.post(c, "/ui/act/limits", form("max_running", "4", "per", "soon"))
		if l, _ := r.b.Inspector().Limits(ctx, "mail"); l.MaxRunning != 3 {
			t.Errorf("a refused limits form changed them: %+v", l)
		}
		if _, body := r.get(c, "/ui/"); !strings.Contains(body, "is not a duration") {
			t.Error("a refused limits form does not say why")
		}
		r.deadJob("mail", broker.Job{Kind: "send", ID: "d2"}, "x")
		r.deadJob("mail", broker.Job{Kind: "send", ID: "d3"}, "x")
		r.post(c, "/ui/act/retry-dead", form("limit", "10"))
		if r.state("mail", "d2") != broker.StatePending || r.state("mail", "d3") != broker.StatePending {
			t.Error("retry-dead left dead jobs")
		}
		r.post(c, "/ui/act/cancel", form("id", "d2", "id", "d3"))
		if r.state("mail", "d2") != broker.StateCancelled || r.state("mail", "d3") != broker.StateCancelled {
			t.Error("bulk cancel left jobs uncancelled")
		}
	})

	t.Run("sign out ends the session", func(t *testing.T) {
		r.post(c, "/ui/logout", url.Values{"csrf": {csrf[1]}})
		resp, _ := r.post(c, "/ui/act/pause", url.Values{"queue": {"mail"}, "csrf": {csrf[1]}})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("after sign-out an action answered %d", resp.StatusCode)
		}
	})
}

// TestHostileNames puts markup, URL syntax and unicode in every name and
// text a job carries, and checks that each page escapes it and that its
// links lead back to the same job.
func TestHostileNames(t *testing.T) {
	r := setup(t, token)
	c := r.client()
	r.signIn(c)
	queues := []string{`q"<b>x</b>'ü✓`, "a/b?c#d%e", "..", "."} // no white space: a queue name may hold none
	ids := []string{`<script>alert(1)</script>`, "x/y?z#w%25", "..", ".", "a b", `"onmouseover="alert(1)`, "javascript:alert(1)"}
	kind := `<img src=x onerror=alert(1)>`
	for _, q := range queues {
		for _, id := range ids {
			r.deadJob(q, broker.Job{Kind: kind, ID: id, Payload: []byte(`</pre><script>alert(2)</script>`)}, `<svg onload=alert(3)>`)
		}
	}
	bad := regexp.MustCompile(`(?i)<script>alert|<img src=x|<svg onload|<b>x</b>|href="javascript:`)
	check := func(path, body string) {
		t.Helper()
		if m := bad.FindString(body); m != "" {
			t.Errorf("GET %s: unescaped %q", path, m)
		}
	}
	_, body := r.get(c, "/ui/")
	check("/ui/", body)
	href := regexp.MustCompile(`href="([^"]+)"`)
	for _, q := range queues {
		// Find the queue's link on the overview, follow it, and from its
		// dead tab follow each job's link.
		var qlink string
		for _, m := range href.FindAllStringSubmatch(body, -1) {
			u := html.UnescapeString(m[1])
			if strings.Contains(u, "/leases") || strings.Contains(u, "view=leases") {
				continue
			}
			if p, err := url.Parse(u); err == nil && (strings.HasPrefix(p.Path, "/ui/queues/") && unescapeSeg(strings.TrimPrefix(p.EscapedPath(), "/ui/queues/")) == q ||
				p.Path == "/ui/queue" && p.Query().Get("queue") == q) {
				qlink = u
			}
		}
		if qlink == "" {
			t.Errorf("the overview has no link to queue %q", q)
			continue
		}
		sep := "?"
		if strings.Contains(qlink, "?") {
			sep = "&"
		}
		code, qbody := r.get(c, qlink+sep+"state=dead")
		check(qlink, qbody)
		if code != http.StatusOK || !strings.Contains(qbody, ">"+strconv.Itoa(len(ids))+"<") {
			t.Errorf("queue %q via %s: %d, not %d dead", q, qlink, code, len(ids))
			continue
		}
		seen := map[string]bool{}
		for _, m := range href.FindAllStringSubmatch(qbody, -1) {
			u := html.UnescapeString(m[1])
			if !strings.Contains(u, "/jobs/") && !strings.HasPrefix(u, "/ui/job?") {
				continue
			}
			code, jbody := r.get(c, u)
			check(u, jbody)
			title := regexp.MustCompile(`<h1>Job <span class="name">(.*?)</span>`).FindStringSubmatch(jbody)
			if code != http.StatusOK || title == nil {
				t.Errorf("job link %s answered %d", u, code)
				continue
			}
			seen[html.UnescapeString(title[1])] = true
			// The retry form names the job exactly.
			form := regexp.MustCompile(`name="id" value="([^"]*)"`).FindStringSubmatch(jbody)
			if form == nil || html.UnescapeString(form[1]) != html.UnescapeString(title[1]) {
				t.Errorf("job page %s: the retry form does not carry its id %q: %v", u, html.UnescapeString(title[1]), form)
			}
			// So does its delete confirmation, reached by its link.
			del := regexp.MustCompile(`href="([^"]+)" id="delete"`).FindStringSubmatch(jbody)
			if del == nil {
				t.Errorf("job page %s has no delete link", u)
				continue
			}
			code, dbody := r.get(c, html.UnescapeString(del[1]))
			check(del[1], dbody)
			dform := regexp.MustCompile(`name="id" value="([^"]*)"`).FindStringSubmatch(dbody)
			if code != http.StatusOK || dform == nil || html.UnescapeString(dform[1]) != html.UnescapeString(title[1]) ||
				!strings.Contains(dbody, `name="state" value="dead"`) {
				t.Errorf("delete confirmation %s: %d, form %v", del[1], code, dform)
			}
		}
		// The purge link of the dead tab leads to its confirmation.
		if m := regexp.MustCompile(`href="([^"]+)" id="purge"`).FindStringSubmatch(qbody); m == nil {
			t.Errorf("queue %q: the dead tab has no purge link", q)
		} else if code, pbody := r.get(c, html.UnescapeString(m[1])); code != http.StatusOK || !strings.Contains(pbody, `name="state" value="dead"`) ||
			!strings.Contains(pbody, `name="queue" value="`+html.EscapeString(q)+`"`) {
			t.Errorf("purge confirmation of queue %q via %s: %d", q, m[1], code)
		} else {
			check(m[1], pbody)
		}
		for _, id := range ids {
			if !seen[id] {
				t.Errorf("queue %q: no link on its page led to job %q (saw %v)", q, id, seen)
			}
		}
	}
}

func newJar() http.CookieJar {
	j, _ := cookiejar.New(nil)
	return j
}

func unescapeSeg(s string) string {
	u, err := url.PathUnescape(s)
	if err != nil {
		return "\x00bad"
	}
	return u
}
