package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const apiTestToken = "api-token-0123456789abcdef"

// selfSigned writes a certificate for 127.0.0.1 and its key, and answers
// their files and a client that trusts the certificate.
func selfSigned(t *testing.T) (cert, key string, client *http.Client) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "workerd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeTestFile(t, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeTestFile(t, key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	parsed, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(parsed)
	return cert, key, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
}

func writeTestFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitFor answers the first match of re in out, waiting for it.
func waitFor(t *testing.T, out *uiOutput, re string) []string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if m := regexp.MustCompile(re).FindStringSubmatch(out.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output:\n%s", re, out.String())
		}
	}
}

func apiDo(t *testing.T, c *http.Client, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiTestToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// workerd api refuses to start without a token, whatever the address,
// and with half a TLS pair; each refusal says what to give.
func TestAPICommandRefusals(t *testing.T) {
	c := newCLI(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"api"}, "--api-token or FENCEQ_API_TOKEN"},
		{[]string{"api", "--listen", "0.0.0.0:0"}, "openssl rand"},
		{[]string{"api", "--api-token", "short"}, "too short"},
		{[]string{"api", "--api-token", apiTestToken, "--tls-cert", "x.pem"}, "--tls-key"},
		{[]string{"api", "--api-token", apiTestToken, "--tls-cert", "nope.pem", "--tls-key", "nope.pem"}, "load the TLS certificate"},
	} {
		code, _, errOut := c.run("", tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("workerd %v: exit %d, stderr %q; want exit 2 and one line naming %q", tc.args, code, errOut, tc.want)
		}
	}
}

// workerd api serves the API over TLS, with the token from the
// environment: enqueue, read, and the document.
func TestAPICommandTLS(t *testing.T) {
	c := newCLI(t)
	cert, key, client := selfSigned(t)
	getenv := func(k string) string {
		return map[string]string{"FENCEQ_API_TOKEN": apiTestToken, "FENCEQ_TLS_CERT": cert, "FENCEQ_TLS_KEY": key}[k]
	}
	out := c.serveUI(getenv, "api", "--listen", "127.0.0.1:0")
	base := waitFor(t, out, `serving the API at (https://\S+/v1/)`)[1]
	if strings.Contains(out.String(), "without TLS") {
		t.Errorf("a loopback TLS listener warns:\n%s", out.String())
	}
	code, body := apiDo(t, client, "POST", base+"queues/mail/jobs", `{"id":"j1","kind":"send","payload":{"to":"ada"}}`)
	if code != 201 {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	code, body = apiDo(t, client, "GET", base+"queues/mail/jobs/j1", "")
	var j struct{ State, Kind string }
	if code != 200 || json.Unmarshal([]byte(body), &j) != nil || j.State != "pending" || j.Kind != "send" {
		t.Fatalf("read: %d %s", code, body)
	}
	if code, body = apiDo(t, client, "GET", base+"openapi.json", ""); code != 200 || !strings.Contains(body, `"openapi"`) {
		t.Fatalf("openapi.json: %d %.100s", code, body)
	}
	root := strings.TrimSuffix(base, "v1/")
	for path, want := range map[string]string{"healthz": "ok", "readyz": "ready"} {
		if code, body = apiDo(t, client, "GET", root+path, ""); code != 200 || strings.TrimSpace(body) != want {
			t.Errorf("/%s: %d %q", path, code, body)
		}
	}
	// Plain HTTP to a TLS listener gets no API.
	if resp, err := http.Get(strings.Replace(base, "https://", "http://", 1) + "openapi.json"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("a TLS listener answered plain HTTP")
		}
	}
}

// workerd run serves the API on its --http listener when the config
// gives a token, and not without one.
func TestRunServesAPI(t *testing.T) {
	for _, withToken := range []bool{true, false} {
		t.Run(fmt.Sprint("token=", withToken), func(t *testing.T) {
			c := newCLI(t)
			addr := uiFreeAddr(t)
			tok := ""
			if withToken {
				tok = "api_token: " + apiTestToken
			}
			cfg := filepath.Join(t.TempDir(), "workerd.yaml")
			writeTestFile(t, cfg, fmt.Appendf(nil, "http: %s\n%s\npools:\n  - queues: [q]\nhandlers:\n  k:\n    exec: {command: [\"true\"]}\n", addr, tok))
			out := c.serveUI(func(string) string { return "" }, "run", "--config", cfg)
			waitFor(t, out, `workerd serving`)
			code, body := apiDo(t, http.DefaultClient, "POST", "http://"+addr+"/v1/queues/q/jobs", `{"kind":"k","id":"a"}`)
			if withToken && code != 201 || !withToken && code != 404 {
				t.Fatalf("enqueue with token %v: %d %s", withToken, code, body)
			}
			if !withToken && !strings.Contains(out.String(), "no api_token") {
				t.Errorf("run without a token does not say the API is off:\n%s", out.String())
			}
		})
	}
}

// Beyond loopback without TLS, ui, api and run each log a warning.
func TestWarnBeyondLoopbackWithoutTLS(t *testing.T) {
	c := newCLI(t)
	env := func(k string) string { return map[string]string{"FENCEQ_API_TOKEN": apiTestToken}[k] }
	for _, args := range [][]string{{"ui", "--addr", "0.0.0.0:0"}, {"api", "--listen", "0.0.0.0:0"}} {
		out := c.serveUI(env, args...)
		waitFor(t, out, `listens beyond loopback without TLS`)
	}
	cfg := filepath.Join(t.TempDir(), "workerd.yaml")
	writeTestFile(t, cfg, []byte("http: 0.0.0.0:0\npools:\n  - queues: [q]\nhandlers:\n  k:\n    exec: {command: [\"true\"]}\n"))
	waitFor(t, c.serveUI(env, "run", "--config", cfg), `listens beyond loopback without TLS`)
}

// workerd ui serves the dashboard over TLS: signing in works, and the
// session cookie is marked Secure.
func TestUICommandTLS(t *testing.T) {
	c := newCLI(t)
	cert, key, client := selfSigned(t)
	out := c.serveUI(func(string) string { return "" }, "ui", "--addr", "127.0.0.1:0", "--ui-token", apiTestToken, "--tls-cert", cert, "--tls-key", key)
	base := waitFor(t, out, `dashboard at (https://\S+/ui/)`)[1]
	jar, _ := cookiejar.New(nil)
	client.Jar = jar
	resp, err := client.PostForm(base+"login", url.Values{"token": {apiTestToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/ui/" {
		t.Fatalf("sign-in over TLS ended at %s with %d", resp.Request.URL, resp.StatusCode)
	}
	cookies := 0
	for r := resp.Request.Response; r != nil; r = r.Request.Response {
		for _, ck := range r.Cookies() {
			// The flash cookie (a message shown once) is the dashboard's
			// to mark too; the session cookie is what a thief would want.
			if ck.Name == "fenceq_ui_session" {
				cookies++
				if !ck.Secure {
					t.Errorf("the session cookie %s set over TLS is not Secure", ck.Name)
				}
			}
		}
	}
	if cookies == 0 {
		t.Error("signing in set no session cookie")
	}
}
