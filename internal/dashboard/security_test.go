package dashboard_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/dashboard"
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
	for _, act := range []string{"retry", "cancel", "release", "retry-dead", "pause", "resume", "limits", "group-limits"} {
		resp, body := r.post(c, "/ui/act/"+act, url.Values{"csrf": {csrf}, "queue": {"nope"}, "id": {"d1"}, "max_running": {"3"}, "next": {"/ui/"}})
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "nope") || !strings.Contains(body, "Nothing was changed") {
			t.Errorf("POST /ui/act/%s on an unknown queue = %d; want 404 naming it:\n%s", act, resp.StatusCode, body)
		}
	}
	if after := r.mr.Keys(); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("requests about an unknown queue changed the keys from\n%q to\n%q", before, after)
	}
	if ok, err := r.b.Inspector().Paused(context.Background(), "nope"); err != nil || ok {
		t.Errorf("the unknown queue is paused=%v (%v)", ok, err)
	}
}

// replay posts form with a copied session cookie, as someone who took it
// would, from a client of their own.
func replay(t *testing.T, base, path, cookie string, form url.Values) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Cookie", cookie)
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// A session cookie copied before sign-out, with a CSRF token read off a
// page, acts no more once its user signed out: not on the dashboard that
// signed it out, nor on another one over the same Redis.
func TestSignOutRevokes(t *testing.T) {
	r := setup(t, token)
	r.deadJob("mail", broker.Job{Kind: "send", ID: "d1"}, "x")
	other := r.sibling()
	c := r.client()
	csrf := r.signIn(c)
	u, _ := url.Parse(r.srv.URL + "/ui/")
	var cookie string
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == "fenceq_ui_session" {
			cookie = ck.Name + "=" + ck.Value
		}
	}
	if cookie == "" {
		t.Fatal("sign-in left no session cookie")
	}
	pause := url.Values{"csrf": {csrf}, "queue": {"mail"}, "next": {"/ui/"}}
	if code := replay(t, other.URL, "/ui/act/pause", cookie, pause); code != http.StatusSeeOther {
		t.Fatalf("a signed-in session's pause on a second dashboard answered %d, want 303", code)
	}
	if code := replay(t, r.srv.URL, "/ui/act/resume", cookie, pause); code != http.StatusSeeOther {
		t.Fatalf("a signed-in session's resume answered %d, want 303", code)
	}
	if resp, _ := r.post(c, "/ui/logout", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out answered %d", resp.StatusCode)
	}
	for _, base := range []string{r.srv.URL, other.URL} {
		if code := replay(t, base, "/ui/act/pause", cookie, pause); code != http.StatusForbidden {
			t.Errorf("the copied cookie's pause after sign-out answered %d, want 403", code)
		}
	}
	if paused, err := r.b.Inspector().Paused(context.Background(), "mail"); err != nil || paused {
		t.Errorf("after sign-out, a replayed cookie paused the queue (paused=%v, %v)", paused, err)
	}
	if code, body := r.get(r.client(), "/ui/"); code != http.StatusOK || strings.Contains(body, `name="csrf"`) {
		t.Errorf("the overview: %d, offers forms to a new client: %v", code, strings.Contains(body, `name="csrf"`))
	}
}

// Nobody without the admin token makes the dashboard store anything: not
// by visiting, not by a wrong token, not by a forged cookie.
func TestAnonymousStoresNothing(t *testing.T) {
	r := setup(t, token)
	r.deadJob("mail", broker.Job{Kind: "send", ID: "d1"}, "x")
	before := r.mr.Keys()
	c := r.client()
	r.get(c, "/ui/")
	r.get(c, "/ui/queues/mail/jobs/d1")
	r.post(c, "/ui/login", url.Values{"token": {"wrong"}})
	for _, v := range []string{"x", "0123.99999999999.forged", strings.Repeat("a", 4000)} {
		replay(t, r.srv.URL, "/ui/act/pause", "fenceq_ui_session="+v, url.Values{"queue": {"mail"}})
	}
	if after := r.mr.Keys(); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("anonymous requests changed the keys from\n%q to\n%q", before, after)
	}
}

// sibling is a second dashboard over the same Redis, with the admin token:
// another workerd process.
func (r *rig) sibling() *httptest.Server {
	r.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.mr.Addr()})
	r.t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	d, err := dashboard.New(dashboard.Config{Inspector: b.Inspector(), Token: token, Logger: slog.New(slog.NewTextHandler(r.logs, nil))})
	if err != nil {
		r.t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	r.t.Cleanup(srv.Close)
	return srv
}

// getAs sends GET path to srv with the Host header host.
func getAs(t *testing.T, srv *httptest.Server, host, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// A page on another site cannot read the dashboard through a name rebound
// to its address: only the listener's own address and the loopback names
// on its port are served by default.
func TestHostChecked(t *testing.T) {
	r := setup(t, "")
	r.deadJob("mail", broker.Job{Kind: "send", ID: "d1"}, "x")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(r.srv.URL, "http://"))
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LocalHost.:" + port, "[::1]:" + port} {
		if code, body := getAs(t, r.srv, host, "/ui/queues/mail/jobs/d1"); code != http.StatusOK {
			t.Errorf("Host %s: %d, want 200:\n%s", host, code, body)
		}
	}
	for _, host := range []string{"evil.example:" + port, "evil.example", "localhost", "localhost:1", "127.0.0.2:" + port, "localhost.evil.example:" + port} {
		for _, path := range []string{"/ui/", "/ui/queues/mail/jobs/d1", "/ui/live", "/ui/static/live.js", "/ui/login"} {
			code, body := getAs(t, r.srv, host, path)
			if code != http.StatusMisdirectedRequest || !strings.Contains(body, strconv.Quote(host)) || !strings.Contains(body, "--ui-allowed-hosts") {
				t.Errorf("GET %s with Host %s: %d, want 421 naming the host and how to allow it:\n%s", path, host, code, body)
			}
			if strings.Contains(body, "d1") || strings.Contains(body, "mail") {
				t.Errorf("a refused Host %s was shown the queue:\n%s", host, body)
			}
		}
	}
}

// The names an operator allows are served too: a bare name on any port, a
// name with a port on that port; "*" turns the check off; an entry that is
// no host name is refused when the dashboard is built.
func TestAllowedHosts(t *testing.T) {
	r := setup(t, "")
	serve := func(allowed ...string) *httptest.Server {
		d, err := dashboard.New(dashboard.Config{Inspector: r.b.Inspector(), AllowedHosts: allowed})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(d)
		t.Cleanup(srv.Close)
		return srv
	}
	srv := serve("Dash.Example.com", "proxy.internal:8443", "[fd00::1]")
	for host, want := range map[string]int{
		"dash.example.com":      http.StatusOK,
		"dash.example.com:9999": http.StatusOK,
		"proxy.internal:8443":   http.StatusOK,
		"proxy.internal":        http.StatusMisdirectedRequest,
		"proxy.internal:8444":   http.StatusMisdirectedRequest,
		"[fd00::1]:8080":        http.StatusOK,
		"example.com":           http.StatusMisdirectedRequest,
	} {
		if code, body := getAs(t, srv, host, "/ui/"); code != want {
			t.Errorf("allowed hosts: Host %s: %d, want %d:\n%s", host, code, want, body)
		}
	}
	if code, _ := getAs(t, serve("*"), "anything.example:1", "/ui/"); code != http.StatusOK {
		t.Errorf(`with "*", any host: %d, want 200`, code)
	}
	for _, bad := range []string{"http://dash.example.com", "dash.example.com/ui", "a b", "", "dash:0", "dash:http"} {
		if _, err := dashboard.New(dashboard.Config{Inspector: r.b.Inspector(), AllowedHosts: []string{bad}}); err == nil || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("allowed host %q: %v, want an error naming it", bad, err)
		}
	}
}
