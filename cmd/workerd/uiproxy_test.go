package main

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// signInFrom posts the admin token to a dashboard from a client behind a
// proxy (X-Forwarded-For), answering the status and the session cookie.
func signInFrom(t *testing.T, addr, tok, client string) (int, *http.Cookie) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/ui/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", client)
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == "fenceq_ui_session" {
			return resp.StatusCode, ck
		}
	}
	return resp.StatusCode, nil
}

// Behind a proxy that terminates TLS, workerd run (ui_secure_cookie,
// ui_client_addr_header) and workerd ui (the flags, or the environment)
// mark the session cookie Secure and rate-limit sign-ins by the address
// the proxy forwards.
func TestUIBehindATLSProxy(t *testing.T) {
	const tok = "an-admin-token-of-32-characters!"
	for _, tc := range []struct {
		name string
		args func(t *testing.T, addr string) []string
		env  map[string]string
	}{
		{"run, workerd.yaml", func(t *testing.T, addr string) []string {
			cfg := filepath.Join(t.TempDir(), "workerd.yaml")
			body := fmt.Sprintf("http: %s\nui_token: %s\nui_secure_cookie: true\nui_client_addr_header: X-Forwarded-For\npools:\n  - queues: [q]\nhandlers:\n  k:\n    exec: {command: [\"true\"]}\n", addr, tok)
			if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{"run", "--config", cfg}
		}, nil},
		{"ui, flags", func(t *testing.T, addr string) []string {
			return []string{"ui", "--addr", addr, "--ui-token", tok, "--ui-secure-cookie", "--ui-client-addr-header", "X-Forwarded-For"}
		}, nil},
		{"ui, environment", func(t *testing.T, addr string) []string {
			return []string{"ui", "--addr", addr}
		}, map[string]string{"FENCEQ_UI_TOKEN": tok, "FENCEQ_UI_SECURE_COOKIE": "true", "FENCEQ_UI_CLIENT_ADDR_HEADER": "X-Forwarded-For"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			addr := uiFreeAddr(t)
			c.serveUI(func(k string) string { return tc.env[k] }, tc.args(t, addr)...)
			uiGet(t, "http://"+addr+"/ui/") // waits until it serves
			status, ck := signInFrom(t, addr, tok, "198.51.100.7")
			if status != http.StatusSeeOther || ck == nil || !ck.Secure {
				t.Fatalf("sign-in: %d, session cookie %v; want 303 and a Secure cookie", status, ck)
			}
			for range 10 {
				signInFrom(t, addr, "a-wrong-token-of-enough-bytes", "203.0.113.9")
			}
			if status, _ := signInFrom(t, addr, tok, "203.0.113.9"); status != http.StatusTooManyRequests {
				t.Fatalf("after 10 wrong tokens from 203.0.113.9: %d, want 429", status)
			}
			if status, _ := signInFrom(t, addr, tok, "198.51.100.7"); status != http.StatusSeeOther {
				t.Fatalf("another client behind the same proxy: %d, want 303", status)
			}
		})
	}
	t.Run("FENCEQ_UI_SECURE_COOKIE that is no bool", func(t *testing.T) {
		c := newCLI(t)
		var out uiOutput
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: func(k string) string {
			return map[string]string{"FENCEQ_UI_SECURE_COOKIE": "yes please"}[k]
		}}
		if code := run(t.Context(), e, []string{"ui", "--addr", uiFreeAddr(t), "--redis", c.url}); code == 0 || !strings.Contains(out.String(), `FENCEQ_UI_SECURE_COOKIE="yes please": give true or false`) {
			t.Fatalf("exit %d, output %q", code, out.String())
		}
	})
}
