package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHTTPServersRefuseHugeHeaders: every server workerd runs the dashboard
// on (workerd ui, workerd run's endpoints) bounds what one request's
// headers may hold: a header of 200 KiB is refused with 431, not read
// into memory (Go's default allows 1 MiB a request).
func TestHTTPServersRefuseHugeHeaders(t *testing.T) {
	for _, cmd := range []string{"ui", "run"} {
		t.Run(cmd, func(t *testing.T) {
			c := newCLI(t)
			c.ok("", "enqueue", "mail", "send", "--id", "j1")
			addr := uiFreeAddr(t)
			if cmd == "ui" {
				c.serveUI(func(string) string { return "" }, "ui", "--addr", addr)
			} else {
				cfg := filepath.Join(t.TempDir(), "workerd.yaml")
				if err := os.WriteFile(cfg, []byte(fmt.Sprintf("http: %s\npools:\n  - queues: [q]\nhandlers:\n  k:\n    exec: {command: [\"true\"]}\n", addr)), 0o644); err != nil {
					t.Fatal(err)
				}
				c.serveUI(func(string) string { return "" }, "run", "--config", cfg)
			}
			uiGet(t, "http://"+addr+"/ui/") // waits until it serves
			for _, path := range []string{"/ui/", "/healthz"} {
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
				req.Header.Set("X-Big", strings.Repeat("b", 200<<10))
				resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
					t.Errorf("workerd %s: GET %s with a 200 KiB header answered %d, want 431", cmd, path, resp.StatusCode)
				}
			}
		})
	}
}

// TestNewHTTPServerBounds: the one server every workerd listener is built
// from bounds how long a connection may take to send its request, to read
// its answer and to idle, and how big its headers may be.
func TestNewHTTPServerBounds(t *testing.T) {
	s := newHTTPServer(http.NotFoundHandler())
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": s.ReadHeaderTimeout, "ReadTimeout": s.ReadTimeout, "WriteTimeout": s.WriteTimeout, "IdleTimeout": s.IdleTimeout} {
		if d <= 0 || d > 2*time.Minute {
			t.Errorf("%s is %v: want a bound, at most 2m", name, d)
		}
	}
	if s.WriteTimeout < 10*time.Second {
		t.Errorf("WriteTimeout %v cuts off a page whose Redis work may take the dashboard's 5 s", s.WriteTimeout)
	}
	if s.MaxHeaderBytes <= 0 || s.MaxHeaderBytes > 64<<10 {
		t.Errorf("MaxHeaderBytes is %d: want at most 64 KiB", s.MaxHeaderBytes)
	}
}
