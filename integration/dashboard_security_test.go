package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// uiBinary is `workerd ui` running under its own key prefix.
type uiBinary struct {
	t      *testing.T
	url    string // http://127.0.0.1:PORT/ui/
	prefix string
	b      *broker.Broker
}

// startUI starts `workerd ui` on a free loopback port with args (and env
// added to the environment), and answers once it printed its address. Its
// key prefix is a new one, or prefix when given.
func startUI(t *testing.T, prefix string, env []string, args ...string) *uiBinary {
	t.Helper()
	c := client(t)
	if prefix == "" {
		prefix = fmt.Sprintf("fqui-%d", time.Now().UnixNano())
		t.Cleanup(func() { deletePrefixKeys(t, prefix) })
	}
	b, err := broker.New(c, broker.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(workerdBin(t), append([]string{"ui", "--redis", "redis://" + redisAddr, "--prefix", prefix, "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), "REDIS_URL=", "FENCEQ_UI_TOKEN=", "FENCEQ_UI_ALLOWED_HOSTS="), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := regexp.MustCompile(`dashboard at (http://\S+/ui/)`).FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case u := <-found:
		return &uiBinary{t: t, url: u, prefix: prefix, b: b}
	case <-exited:
		t.Fatalf("workerd ui exited before serving:\n%s", stderr.String())
	case <-time.After(15 * time.Second):
		t.Fatalf("workerd ui printed no address within 15s:\n%s", stderr.String())
	}
	return nil
}

// do sends req (a path under /ui/) with c and answers the status and body.
func (u *uiBinary) do(c *http.Client, req *http.Request) (int, string) {
	u.t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		u.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (u *uiBinary) get(c *http.Client, path string) (int, string) {
	u.t.Helper()
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(u.url, "/ui/")+path, nil)
	if err != nil {
		u.t.Fatal(err)
	}
	return u.do(c, req)
}

func (u *uiBinary) post(c *http.Client, path string, form url.Values, cookie string) (int, string) {
	u.t.Helper()
	req, err := http.NewRequest(http.MethodPost, strings.TrimSuffix(u.url, "/ui/")+path, strings.NewReader(form.Encode()))
	if err != nil {
		u.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	return u.do(c, req)
}

func noRedirects() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Anonymous requests about queues that do not exist answer 404, on every
// page and the live updates, and leave nothing in Redis for their names.
func TestWorkerdUIUnknownQueue404(t *testing.T) {
	t.Parallel()
	u := startUI(t, "", nil)
	ctx := context.Background()
	if _, err := u.b.Client().Enqueue(ctx, broker.Job{Queue: "mail", Kind: "send", ID: "j1"}); err != nil {
		t.Fatal(err)
	}
	c := noRedirects()
	if code, body := u.get(c, "/ui/live?queue=mail"); code != http.StatusOK || !strings.Contains(body, `"pending|mail":"1"`) {
		t.Fatalf("the live figures of a queue that exists: %d %s", code, body)
	}
	for i := range 50 {
		q := url.QueryEscape(fmt.Sprintf("nope-%d", i))
		for _, path := range []string{
			"/ui/live?queue=" + q,
			"/ui/live?queue=" + q + "&job=j1",
			"/ui/queues/" + q,
			"/ui/queues/" + q + "/leases",
			"/ui/queues/" + q + "/jobs/j1",
			"/ui/queues/" + q + "/jobs/j1/release",
		} {
			if code, body := u.get(c, path); code != http.StatusNotFound || !strings.Contains(body, "nope-") {
				t.Fatalf("GET %s = %d; want 404 naming the queue:\n%s", path, code, body)
			}
		}
	}
	if keys, err := client(t).Keys(ctx, u.prefix+":{nope-*").Result(); err != nil || len(keys) > 0 {
		t.Errorf("requests about unknown queues left keys %q (%v)", keys, err)
	}
}

// Through two workerd ui processes over one Redis: a session cookie and
// CSRF token copied off a signed-in browser act on either; once its user
// signed out on one, replayed on the other they are refused.
func TestWorkerdUISignOutRevokes(t *testing.T) {
	t.Parallel()
	env := []string{"FENCEQ_UI_TOKEN=the-admin-token-of-this-test"}
	one := startUI(t, "", env)
	two := startUI(t, one.prefix, env)
	ctx := context.Background()
	if _, err := one.b.Client().Enqueue(ctx, broker.Job{Queue: "mail", Kind: "send"}); err != nil {
		t.Fatal(err)
	}
	c := noRedirects()
	req, _ := http.NewRequest(http.MethodPost, strings.TrimSuffix(one.url, "/ui/")+"/ui/login", strings.NewReader(url.Values{"token": {"the-admin-token-of-this-test"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie string
	for _, ck := range resp.Cookies() {
		if ck.Name == "fenceq_ui_session" {
			cookie = ck.Name + "=" + ck.Value
		}
	}
	if resp.StatusCode != http.StatusSeeOther || cookie == "" {
		t.Fatalf("sign-in answered %d with cookies %v", resp.StatusCode, resp.Cookies())
	}
	req, _ = http.NewRequest(http.MethodGet, one.url, nil)
	req.Header.Set("Cookie", cookie)
	_, page := one.do(c, req)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("a signed-in overview carries no CSRF token:\n%s", page)
	}
	form := url.Values{"csrf": {m[1]}, "queue": {"mail"}, "next": {"/ui/"}}
	if code, body := two.post(c, "/ui/act/pause", form, cookie); code != http.StatusSeeOther {
		t.Fatalf("the signed-in session's pause on the second process answered %d:\n%s", code, body)
	}
	if code, body := one.post(c, "/ui/act/resume", form, cookie); code != http.StatusSeeOther {
		t.Fatalf("the signed-in session's resume answered %d:\n%s", code, body)
	}
	if code, body := one.post(c, "/ui/logout", form, cookie); code != http.StatusSeeOther {
		t.Fatalf("sign-out answered %d:\n%s", code, body)
	}
	for _, u := range []*uiBinary{two, one} {
		if code, body := u.post(c, "/ui/act/pause", form, cookie); code != http.StatusForbidden || !strings.Contains(body, "not signed in") {
			t.Errorf("the copied cookie's pause after sign-out answered %d, want 403:\n%s", code, body)
		}
	}
	if paused, err := one.b.Inspector().Paused(ctx, "mail"); err != nil || paused {
		t.Errorf("after sign-out, a replayed cookie paused the queue (paused=%v, %v)", paused, err)
	}
}

// getHost sends GET path to u with the Host header host, from a real
// client, as a browser on a rebound name would.
func (u *uiBinary) getHost(host, path string) (int, string) {
	u.t.Helper()
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(u.url, "/ui/")+path, nil)
	if err != nil {
		u.t.Fatal(err)
	}
	req.Host = host
	return u.do(noRedirects(), req)
}

// workerd ui refuses a forged Host with 421 saying how to allow it, serves
// its own address and localhost, and the names allowed by --ui-allowed-hosts
// or FENCEQ_UI_ALLOWED_HOSTS; a name that is no host name stops it at once.
func TestWorkerdUIHostChecked(t *testing.T) {
	t.Parallel()
	u := startUI(t, "", nil)
	if _, err := u.b.Client().Enqueue(context.Background(), broker.Job{Queue: "mail", Kind: "send", ID: "j1"}); err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(u.url, "http://"), "/ui/"), ":")
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port} {
		if code, body := u.getHost(host, "/ui/queues/mail/jobs/j1"); code != http.StatusOK || !strings.Contains(body, "j1") {
			t.Errorf("Host %s: %d, want the job's page:\n%s", host, code, body)
		}
	}
	for _, host := range []string{"rebound.example:" + port, "dash.example.com"} {
		code, body := u.getHost(host, "/ui/queues/mail/jobs/j1")
		if code != http.StatusMisdirectedRequest || !strings.Contains(body, `"`+host+`"`) || !strings.Contains(body, "--ui-allowed-hosts") || strings.Contains(body, "j1") {
			t.Errorf("forged Host %s: %d, want 421 naming it and how to allow it:\n%s", host, code, body)
		}
	}
	flag := startUI(t, u.prefix, nil, "--ui-allowed-hosts", "dash.example.com, proxy.example:8443")
	env := startUI(t, u.prefix, []string{"FENCEQ_UI_ALLOWED_HOSTS=env.example"})
	for _, tc := range []struct {
		u    *uiBinary
		host string
		want int
	}{
		{flag, "dash.example.com", http.StatusOK},
		{flag, "proxy.example:8443", http.StatusOK},
		{flag, "proxy.example", http.StatusMisdirectedRequest},
		{flag, "env.example", http.StatusMisdirectedRequest},
		{env, "env.example:80", http.StatusOK},
		{env, "dash.example.com", http.StatusMisdirectedRequest},
	} {
		if code, body := tc.u.getHost(tc.host, "/ui/queues/mail"); code != tc.want {
			t.Errorf("Host %s: %d, want %d:\n%s", tc.host, code, tc.want, body)
		}
	}
	code, _, stderr := workerd(t, "", "ui", "--redis", "redis://"+redisAddr, "--prefix", u.prefix, "--addr", "127.0.0.1:0", "--ui-allowed-hosts", "https://dash.example.com")
	if code != 2 || !strings.Contains(stderr, `"https://dash.example.com"`) {
		t.Errorf("a URL as an allowed host: exit %d, want 2 naming it:\n%s", code, stderr)
	}
}

// TestWorkerdHTTPMetricsHostChecked: workerd run's /metrics names the
// queues and counts their jobs, so it answers the Host names the dashboard
// answers (its address, localhost on its port, ui_allowed_hosts) and no
// other: a page on another site that rebinds its own name to this address
// reads nothing. /healthz and /readyz, which tell nothing, answer any
// Host.
func TestWorkerdHTTPMetricsHostChecked(t *testing.T) {
	t.Parallel()
	client(t) // skips (or fails under CI) without Redis
	prefix := fmt.Sprintf("fqmet-%d", time.Now().UnixNano())
	t.Cleanup(func() { deletePrefixKeys(t, prefix) })
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := minimalConfig(t, "metq", "http: "+addr+"\nui_allowed_hosts: [scrape.example]\n")
	cmd := exec.Command(workerdBin(t), "run", "--config", cfg, "--redis", "redis://"+redisAddr, "--prefix", prefix, "--log-format", "json")
	cmd.Env = append(os.Environ(), "REDIS_URL=", "FENCEQ_UI_TOKEN=", "FENCEQ_UI_ALLOWED_HOSTS=")
	var logs syncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	get := func(host, path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		req.Host = host
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := get(addr, "/healthz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workerd run did not serve /healthz on %s within 15s:\n%s", addr, logs.String())
		}
	}
	_, port, _ := strings.Cut(addr, ":")
	for _, tc := range []struct {
		host, path string
		want       int
	}{
		{addr, "/metrics", http.StatusOK},
		{"localhost:" + port, "/metrics", http.StatusOK},
		{"scrape.example", "/metrics", http.StatusOK},
		{"rebound.example:" + port, "/metrics", http.StatusMisdirectedRequest},
		{"rebound.example:" + port, "/healthz", http.StatusOK},
		{"rebound.example:" + port, "/readyz", http.StatusOK},
	} {
		code, body := get(tc.host, tc.path)
		if code != tc.want {
			t.Errorf("GET %s with Host %s: %d, want %d:\n%.500s", tc.path, tc.host, code, tc.want, body)
		}
		if tc.path == "/metrics" && code == http.StatusOK && !strings.Contains(body, `queue="metq"`) {
			t.Errorf("GET /metrics with Host %s does not show the queue metq:\n%.2000s", tc.host, body)
		}
		if code == http.StatusMisdirectedRequest && strings.Contains(body, "metq") {
			t.Errorf("GET %s with Host %s was refused but names the queue:\n%s", tc.path, tc.host, body)
		}
	}
}
