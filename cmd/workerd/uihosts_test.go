package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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
