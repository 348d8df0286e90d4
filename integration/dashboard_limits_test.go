package integration

import (
	"bufio"
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// TestWorkerdUILimitsForm: through `workerd ui` and an HTTP client that
// signs in and posts the queue page's limits form as a browser would,
// setting a rate keeps the max-running limit the form did not change.
func TestWorkerdUILimitsForm(t *testing.T) {
	c := client(t)
	prefix := fmt.Sprintf("fquilimits%d", time.Now().UnixNano())
	t.Cleanup(func() { dropPrefix(t, c, prefix) })
	b, err := broker.New(c, broker.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "mail", Kind: "send"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Inspector().SetMaxRunning(ctx, "mail", 5); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(workerdBin(t), "ui", "--redis", "redis://"+redisAddr, "--prefix", prefix,
		"--addr", "127.0.0.1:0", "--ui-token", uiToken)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("workerd ui printed no address: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	m := regexp.MustCompile(`(http://\S+)/ui/`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("workerd ui printed %q, no dashboard address", line)
	}
	base := m[1]

	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	get := func(path string) string {
		t.Helper()
		resp, err := hc.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s answered %d: %s", path, resp.StatusCode, body)
		}
		return string(body)
	}
	post := func(path string, v url.Values) {
		t.Helper()
		resp, err := hc.PostForm(base+path, v)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s answered %d (after redirects)", path, resp.StatusCode)
		}
	}
	post("/ui/login", url.Values{"token": {uiToken}, "next": {"/ui/"}})

	// The limits form as the queue page renders it, every input as sent.
	form := regexp.MustCompile(`(?s)<form method="post" action="/ui/act/limits".*?</form>`).FindString(get("/ui/queues/mail"))
	if !strings.Contains(form, `name="csrf"`) {
		t.Fatalf("the signed-in queue page has no limits form with a CSRF token: %q", form)
	}
	v := url.Values{}
	for _, in := range regexp.MustCompile(`<input [^>]*>`).FindAllString(form, -1) {
		var name, value string
		for _, a := range regexp.MustCompile(`(name|value)="([^"]*)"`).FindAllStringSubmatch(in, -1) {
			if a[1] == "name" {
				name = html.UnescapeString(a[2])
			} else {
				value = html.UnescapeString(a[2])
			}
		}
		v.Set(name, value)
	}
	if v.Get("max_running") != "5" {
		t.Errorf("the limits form does not start from max running 5: %v", v)
	}
	v.Set("rate", "100")
	v.Set("per", "1m")
	v.Set("next", "/ui/queues/mail")
	post("/ui/act/limits", v)
	l, err := b.Inspector().Limits(ctx, "mail")
	if err != nil {
		t.Fatal(err)
	}
	if l != (broker.Limits{MaxRunning: 5, Rate: 100, Per: time.Minute}) {
		t.Fatalf("after setting a rate through the form the limits are %q; want max running 5 kept", l)
	}
	if page := html.UnescapeString(get("/ui/queues/mail")); !strings.Contains(page, "at most 5 running, at most 100 starts per 1m0s") {
		t.Error("the queue page does not show the limits the form set")
	}
}
