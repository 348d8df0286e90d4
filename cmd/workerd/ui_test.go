package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// uiOutput is a command's output, read while the command runs.
type uiOutput struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *uiOutput) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *uiOutput) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serve runs a long-running command until the test ends.
func (c *cli) serveUI(getenv func(string) string, args ...string) *uiOutput {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &uiOutput{}
	done := make(chan int)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: out, stderr: out, getenv: getenv}
		done <- run(ctx, e, append(args, "--redis", c.url, "--log-format", "json"))
	}()
	c.t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			c.t.Error("the command did not stop")
		}
	})
	return out
}

func uiGet(t *testing.T, url string) (int, string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
}

func uiFreeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestUICommand(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "mail", "send", "--id", "j1")
	noEnv := func(string) string { return "" }
	out := c.serveUI(noEnv, "ui", "--addr", "127.0.0.1:0")
	var url string
	for deadline := time.Now().Add(10 * time.Second); url == ""; time.Sleep(10 * time.Millisecond) {
		if m := regexp.MustCompile(`dashboard at (http://\S+/ui/)`).FindStringSubmatch(out.String()); m != nil {
			url = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("workerd ui printed no address:\n%s", out.String())
		}
	}
	if !strings.Contains(out.String(), "read-only") {
		t.Errorf("without a token, workerd ui does not say it is read-only:\n%s", out.String())
	}
	code, body := uiGet(t, url+"queues/mail/jobs/j1")
	if code != 200 || !strings.Contains(body, "j1") || !strings.Contains(body, "read-only") {
		t.Fatalf("the job's page: %d\n%s", code, body)
	}
	if code, body := uiGet(t, strings.TrimSuffix(url, "ui/")); code != 200 || !strings.Contains(body, `href="/ui/queues/mail"`) {
		t.Fatalf("/ does not lead to the overview: %d\n%s", code, body)
	}
	if code, _ := uiGet(t, url+"login"); code != 404 {
		t.Errorf("a read-only dashboard serves a sign-in page: %d", code)
	}
}

func TestRunServesDashboard(t *testing.T) {
	c := newCLI(t)
	addr := uiFreeAddr(t)
	cfg := filepath.Join(t.TempDir(), "workerd.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
http: %s
ui_token: from-the-config-file
pools:
  - queues: [q]
handlers:
  k:
    exec: {command: ["true"]}
`, addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	c.serveUI(func(string) string { return "" }, "run", "--config", cfg)
	code, body := uiGet(t, "http://"+addr+"/ui/login")
	if code != 200 || !strings.Contains(body, `name="token"`) {
		t.Fatalf("with ui_token, /ui/login: %d\n%s", code, body)
	}
	resp, err := http.PostForm("http://"+addr+"/ui/login", map[string][]string{"token": {"from-the-config-file"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/ui/" || resp.StatusCode != 200 {
		t.Fatalf("signing in with the config's token ended at %s with %d", resp.Request.URL, resp.StatusCode)
	}
}
