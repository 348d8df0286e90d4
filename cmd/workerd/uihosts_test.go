package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// workerd run's dashboard answers the names ui_allowed_hosts lists beside
// its own address, and FENCEQ_UI_ALLOWED_HOSTS when the config lists none.
func TestRunAllowedHosts(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		env          map[string]string
	}{
		{"config", "ui_allowed_hosts: [dash.example.com]\n", nil},
		{"env", "", map[string]string{"FENCEQ_UI_ALLOWED_HOSTS": "other.example,dash.example.com"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			addr := uiFreeAddr(t)
			cfg := filepath.Join(t.TempDir(), "workerd.yaml")
			if err := os.WriteFile(cfg, []byte(fmt.Sprintf("http: %s\n%spools:\n  - queues: [q]\nhandlers:\n  k:\n    exec: {command: [\"true\"]}\n", addr, tc.config)), 0o644); err != nil {
				t.Fatal(err)
			}
			c.serveUI(func(k string) string { return tc.env[k] }, "run", "--config", cfg)
			uiGet(t, "http://"+addr+"/healthz") // waits until it serves
			for host, want := range map[string]int{
				addr:               http.StatusOK,
				"dash.example.com": http.StatusOK,
				"rebound.example:" + addr[len("127.0.0.1:"):]: http.StatusMisdirectedRequest,
			} {
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/ui/", nil)
				req.Host = host
				resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
				}
			}
		})
	}
}

// TestWildcardAddressURLAnswers: `workerd ui --addr 0.0.0.0:8080` (or
// --addr :8080, which listens on [::]) prints the address a person opens,
// and that address must be one the dashboard answers. A browser that opens
// http://0.0.0.0:8080/ui/ connects over loopback and sends Host
// 0.0.0.0:8080, so a dashboard on 127.0.0.1 sees the same request as one on
// 0.0.0.0 does: the test serves on loopback and sends the printed host.
func TestWildcardAddressURLAnswers(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "mail", "send", "--id", "j1")
	addr := uiFreeAddr(t)
	c.serveUI(func(string) string { return "" }, "ui", "--addr", addr)
	uiGet(t, "http://"+addr+"/ui/") // waits until it serves
	port := addr[len("127.0.0.1:"):]
	for _, ip := range []net.IP{net.IPv4zero, net.IPv6unspecified} {
		p, _ := strconv.Atoi(port)
		printed := dashboardURL(&net.TCPAddr{IP: ip, Port: p})
		u, err := url.Parse(printed)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+u.Path, nil)
		req.Host = u.Host // what a browser that opened the printed URL sends
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("listening on %s, workerd ui prints %s; opening it answers %d, want 200:\n%s", ip, printed, resp.StatusCode, body)
		}
	}
}
